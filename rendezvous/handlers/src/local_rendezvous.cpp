#include "local_rendezvous.hpp"

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/store/auth.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;

namespace {
store::ServerOptions bind_options(const RendezvousConfig& c) {
  store::ServerOptions o;
  o.host = c.store_host;
  o.port = static_cast<uint16_t>(c.store_port);
  return o;
}
}  // namespace

LocalRendezvous::LocalRendezvous(asio::io_context& io, RendezvousConfig config)
    : config_(std::move(config)), server_(io, bind_options(config_)), interruption_(io) {}

LocalRendezvous::~LocalRendezvous() = default;

asio::awaitable<void> LocalRendezvous::join() { co_return; }

asio::awaitable<std::optional<Round>> LocalRendezvous::next_round() {
  if (restarts_ > config_.max_restarts) {
    ending_ = JobEnd{JobEnd::Kind::kRestartsExhausted, "no restarts remain"};
    co_return std::nullopt;
  }
  Round r;
  r.number = restarts_;
  r.restart_count = restarts_;
  r.world_size = config_.nproc;
  co_return r;
}

asio::awaitable<std::optional<WorkerStoreAddress>> LocalRendezvous::worker_store(Round r) {
  if (r.number > 0) server_.store().clear();
  co_return WorkerStoreAddress{config_.master_addr, server_.port()};
}

asio::awaitable<std::string> LocalRendezvous::interruption(Round) {
  while (!stop_requested_) {
    interruption_.expires_at(asio::steady_timer::time_point::max());
    co_await interruption_.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  stop_requested_ = false;  // consumed: the next round's wait starts afresh
  co_return std::string();
}

void LocalRendezvous::stop_waiting() {
  stop_requested_ = true;
  interruption_.cancel();
}

asio::awaitable<void> LocalRendezvous::end_round(Round r, bool) {
  restarts_ = r.restart_count + 1;  // failed or interrupted (a stuck worker): a restart either way
  co_return;
}

asio::awaitable<bool> LocalRendezvous::exit_barrier(Round) { co_return true; }

asio::awaitable<void> LocalRendezvous::close(std::string why) {
  ending_ = JobEnd{JobEnd::Kind::kSucceeded, std::move(why)};
  co_return;
}

namespace {
constexpr std::string_view kSelf = "0";
}  // namespace

asio::awaitable<void> LocalRendezvous::publish(Scope scope, std::string topic, std::string value) {
  book_.put_value(scope, topic, kSelf, std::move(value));
  co_return;
}

asio::awaitable<std::string> LocalRendezvous::job_secret() {
  if (secret_.empty()) secret_ = store::auth::fresh_secret();
  co_return secret_;
}

asio::awaitable<std::vector<std::string>> LocalRendezvous::gather(Scope scope, std::string topic,
                                                                  int, std::chrono::milliseconds) {
  co_return book_.values(scope, topic);
}

asio::awaitable<void> LocalRendezvous::raise(Scope scope, std::string topic, std::string reason,
                                             std::string detail) {
  Flag f;
  f.node = kSelf;
  f.reason = std::move(reason);
  f.detail = std::move(detail);
  f.mine = true;
  book_.put_flag(scope, topic, std::move(f));
  co_return;
}

std::optional<Flag> LocalRendezvous::raised(Scope scope, std::string topic) const {
  return book_.flag(scope, topic);
}

asio::awaitable<void> LocalRendezvous::leave(bool) {
  abandon();
  co_return;
}

std::string LocalRendezvous::describe() const {
  return fmt::format("single node, store here on port {}", server_.port());
}

void LocalRendezvous::abandon() {
  stop_waiting();
  server_.stop();
}

}  // namespace ddprun::rendezvous
