#pragma once
// Turns for coroutines on one executor that share a connection which takes one request at a time:
// lock() returns a guard once every earlier holder has released it, in the order they asked.
#include <deque>
#include <memory>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ddprun::store {

class AsyncMutex {
 public:
  class Guard {
   public:
    explicit Guard(AsyncMutex* m) : m_(m) {}
    Guard(Guard&& o) noexcept : m_(o.m_) { o.m_ = nullptr; }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    Guard& operator=(Guard&&) = delete;
    ~Guard() {
      if (m_ != nullptr) m_->unlock();
    }

   private:
    AsyncMutex* m_;
  };

  explicit AsyncMutex(boost::asio::any_io_executor ex) : ex_(std::move(ex)) {}

  boost::asio::awaitable<Guard> lock() {
    if (locked_) {
      // Woken by unlock(), which hands the turn over without releasing it.
      auto turn = std::make_shared<boost::asio::steady_timer>(
          ex_, boost::asio::steady_timer::time_point::max());
      waiting_.push_back(turn);
      co_await turn->async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    locked_ = true;
    co_return Guard(this);
  }

 private:
  void unlock() {
    if (waiting_.empty()) {
      locked_ = false;
      return;
    }
    waiting_.front()->cancel();
    waiting_.pop_front();
  }

  boost::asio::any_io_executor ex_;
  bool locked_ = false;
  std::deque<std::shared_ptr<boost::asio::steady_timer>> waiting_;
};

}  // namespace ddprun::store
