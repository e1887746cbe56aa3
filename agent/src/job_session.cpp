#include "ddprun/agent/job_session.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/errors.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

JobSession::JobSession(asio::any_io_executor ex, SessionSpec spec)
    : ex_(ex),
      session_(std::move(spec)),
      base_("ddprun/" + session_.run_id + "/"),
      heartbeat_timer_(ex) {}

JobSession::~JobSession() = default;

// (Outside the coroutines: g++ 12 miscompiles braced initializer lists inside one.)
std::string JobSession::node_record(int nproc, const std::string& host) {
  return nlohmann::json{{"nproc", nproc}, {"host", host}}.dump();
}

std::string JobSession::key(const std::string& rest) const { return base_ + rest; }

asio::awaitable<void> JobSession::open(const std::string& presence_key, const std::string& value) {
  rendezvous::ClientOptions o;
  o.timeout = session_.join_timeout;
  const auto port = static_cast<uint16_t>(session_.store_port);
  presence_ = co_await rendezvous::AsyncStoreClient::connect(ex_, session_.store_host, port, o);
  co_await presence_->keepalive(session_.heartbeat_timeout);
  co_await presence_->set_owned(key(presence_key), value);
  co_await presence_->ping(0);  // a round trip: the key exists before the watch below starts
  client_ = co_await rendezvous::AsyncStoreClient::connect(ex_, session_.store_host, port, o);
  watch_ = co_await rendezvous::AsyncStoreWatch::connect(ex_, session_.store_host, port, o);
  for (const auto& e : co_await watch_->add(rendezvous::wire::WatchMode::kPrefix, base_)) apply(e);
  // The session must outlive both; it keeps itself alive until the last of them has ended (then
  // releases itself from a posted handler, once nothing runs on it any more).
  self_ = shared_from_this();
  background_ = 2;
  asio::co_spawn(ex_, pump(), asio::detached);
  asio::co_spawn(ex_, heartbeat(), asio::detached);
}

void JobSession::apply(const rendezvous::WatchEventRecord& e) {
  if (!e.key.starts_with(base_)) return;
  try {
    on_event(e.key.substr(base_.size()), e);
  } catch (const std::exception& ex) {
    spdlog::warn("ignoring malformed rendezvous key '{}': {}", e.key, ex.what());
  }
  notify();
}

asio::awaitable<void> JobSession::pump() {
  while (!left_) {
    try {
      apply(co_await watch_->next(std::chrono::hours(24)));
    } catch (const rendezvous::StoreTimeout&) {
    } catch (const std::exception& e) {
      lost_store(e);
      break;
    }
  }
  background_ended();
}

asio::awaitable<void> JobSession::heartbeat() {
  for (uint32_t n = 1; !left_; ++n) {
    heartbeat_timer_.expires_after(session_.heartbeat_timeout / 3);
    co_await heartbeat_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    if (left_) break;
    try {
      co_await presence_->ping(n, session_.heartbeat_timeout);
    } catch (const std::exception& e) {
      lost_store(e);
      break;
    }
  }
  background_ended();
}

void JobSession::lost_store(const std::exception& e) {
  if (!left_) broken_ = fmt::format("lost the connection to the rendezvous store: {}", e.what());
  notify();
}

void JobSession::stop_waiting() {
  stop_waiting_ = true;
  notify();
}

void JobSession::background_ended() {
  // Released from a posted handler: the coroutine calling this still runs on the session.
  if (--background_ == 0) asio::post(ex_, [s = std::move(self_)] {});
}

void JobSession::notify() {
  for (auto* t : waiters_) t->cancel();
}

asio::awaitable<bool> JobSession::wait_until(std::function<bool()> pred,
                                             Clock::time_point deadline) {
  asio::steady_timer timer(ex_);
  waiters_.push_back(&timer);
  while (!pred() && broken_.empty() && Clock::now() < deadline) {
    timer.expires_at(deadline);
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  std::erase(waiters_, &timer);
  if (!broken_.empty()) throw rendezvous::StoreConnectionError(broken_);
  co_return pred();
}

void JobSession::leave() {
  left_ = true;
  broken_ = "this agent left the job";  // any waiter still parked (an old round's watcher) ends
  // Closing, not destroying: the background coroutines are suspended inside these objects and
  // finish on the errors the close produces.
  if (presence_) presence_->close();
  if (client_) client_->close();
  if (watch_) watch_->close();
  heartbeat_timer_.cancel();
  notify();
}

}  // namespace ddprun::agent
