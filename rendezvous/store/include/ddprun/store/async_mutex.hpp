#pragma once
// Turns for coroutines on one executor that share a connection which takes one request at a time:
// lock() returns a guard once every earlier holder has released it, in the order they asked. A
// waiter whose coroutine is cancelled leaves the line (operation_aborted) without ever holding the
// turn; the turn it would have had goes to the next.
#include <deque>
#include <memory>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

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
      // Woken by unlock(), which hands the turn over without releasing it (`given`); a wake
      // without it is the coroutine's cancellation.
      auto turn = std::make_shared<Turn>(ex_);
      waiting_.push_back(turn);
      try {
        co_await turn->wake.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
      } catch (...) {  // cancelled before it waited
        std::erase(waiting_, turn);
        throw;
      }
      if (!turn->given) {
        std::erase(waiting_, turn);
        throw boost::system::system_error(boost::asio::error::operation_aborted);
      }
    }
    locked_ = true;
    co_return Guard(this);
  }

 private:
  struct Turn {
    explicit Turn(const boost::asio::any_io_executor& ex)
        : wake(ex, boost::asio::steady_timer::time_point::max()) {}
    boost::asio::steady_timer wake;
    bool given = false;
  };

  void unlock() {
    if (waiting_.empty()) {
      locked_ = false;
      return;
    }
    waiting_.front()->given = true;
    waiting_.front()->wake.cancel();
    waiting_.pop_front();
  }

  boost::asio::any_io_executor ex_;
  bool locked_ = false;
  std::deque<std::shared_ptr<Turn>> waiting_;
};

}  // namespace ddprun::store
