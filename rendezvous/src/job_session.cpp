#include "ddprun/rendezvous/job_session.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/errors.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

JobSession::JobSession(asio::any_io_executor ex, std::shared_ptr<JobStore> store)
    : ex_(ex), store_(std::move(store)) {}

JobSession::~JobSession() = default;

// (Outside the coroutines: g++ 12 miscompiles braced initializer lists inside one.)
std::string JobSession::node_record(int nproc, const std::string& host) {
  return nlohmann::json{{"nproc", nproc}, {"host", host}}.dump();
}

int JobSession::nproc_of_record(const std::string& record) {
  return nlohmann::json::parse(record).value("nproc", 1);
}

asio::awaitable<void> JobSession::open(std::string presence_key, std::string value) {
  for (const auto& e : co_await store_->join(presence_key, value)) apply(e);
  asio::co_spawn(ex_, pump(), asio::detached);
}

void JobSession::apply(const KeyEvent& e) {
  try {
    on_event(e);
  } catch (const std::exception& ex) {
    spdlog::warn("ignoring malformed rendezvous key '{}': {}", e.key, ex.what());
  }
  notify();
}

asio::awaitable<void> JobSession::pump() {
  const auto self = shared_from_this();  // the session outlives this coroutine
  while (!left_) {
    try {
      apply(co_await store_->next_event());
    } catch (const std::exception& e) {
      if (!left_) broken_ = e.what();
      notify();
      break;
    }
  }
}

void JobSession::stop_waiting() {
  stop_waiting_ = true;
  notify();
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
  if (!broken_.empty()) throw StoreConnectionError(broken_);
  co_return pred();
}

void JobSession::leave_store() {
  if (left_) return;
  left_ = true;
  broken_ = "this agent left the job";  // any waiter still parked (an old round's watcher) ends
  store_->leave();
  notify();
}

}  // namespace ddprun::rendezvous
