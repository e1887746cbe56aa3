#include "job_stop.hpp"

#include <chrono>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/agent/signals.hpp"
#include "exchanges/stop_exchange.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;

namespace {
// How long a stopping agent that waits outside its workers' run gives its peers' store to take
// the news of the stop before it leaves.
constexpr auto kAnnounceLimit = std::chrono::seconds(1);
}  // namespace

JobStop::JobStop(asio::io_context& io, std::shared_ptr<rendezvous::Rendezvous> rdzv,
                 WorkerGroup& group, EventLog& events, int node_rank)
    : io_(io), rdzv_(std::move(rdzv)), group_(group), events_(events), node_rank_(node_rank) {}

void JobStop::signal(int signo) {
  events_.record("signal", {{"signal", signal_name(signo)}});
  const bool first = std::exchange(signo_, signo) == 0;
  if (std::exchange(peer_stopped_, false) && group_.active()) {
    // The workers are already stopping with the job's signal, which a peer passed on first: this
    // one is the same stop arriving here, not a second request to kill at once.
  } else if (group_.active()) {
    if (first) spawn(stop_exchange::announce(rdzv_, node_rank_, signo));
    group_.stop(signo);
  } else if (first) {
    stop_waiting_after_announcing(signo);
  } else {
    stop_waiting();
  }
}

void JobStop::follow_peer(int signo, const std::string& why) {
  if (signo_ != 0) return;
  spdlog::warn("{}: forwarding {} to the workers and shutting down", why, signal_name(signo));
  events_.record("signal", {{"signal", signal_name(signo)}, {"from", why}});
  signo_ = signo;
  peer_stopped_ = true;
  group_.stop(signo);
}

void JobStop::adopt(int signo) {
  if (signo_ == 0) signo_ = signo;
}

// The peers are told of the stop first (at most kAnnounceLimit; node 0's store goes with its
// agent), then every wait ends.
void JobStop::stop_waiting_after_announcing(int signo) {
  auto limit = std::make_shared<asio::steady_timer>(io_, kAnnounceLimit);
  limit->async_wait([this, limit](boost::system::error_code) { stop_waiting(); });
  spawn([rdzv = rdzv_, node_rank = node_rank_, signo, limit]() -> asio::awaitable<void> {
    try {
      co_await stop_exchange::announce(rdzv, node_rank, signo);
    } catch (const std::exception&) {  // cancelled as the job ended
    }
    limit->cancel();
  });
}

void JobStop::end() {
  ended_ = true;
  // A copy: a task's completion (erasing it) never runs inside emit(), but the map is not relied
  // on to stay as it is meanwhile.
  const auto running = tasks_;
  for (const auto& [id, task] : running) task->emit(asio::cancellation_type::terminal);
}

void JobStop::stop_waiting() {
  if (std::exchange(stopped_waiting_, true)) return;
  if (group_.active()) {  // a round's workers started meanwhile: the stop is theirs
    group_.stop(signo_);
    return;
  }
  rdzv_->abandon();
  waits_.emit(asio::cancellation_type::terminal);
}

}  // namespace ddprun::agent
