#pragma once
// A TCP relay on loopback between clients and a server, on its own thread: it keeps every byte the
// clients send (to show what crosses the wire), can flip one of them (to show what a tampered
// stream does) and can stop passing them on (to show what a stream cut in the middle does). Like a
// real proxy, it accepts a client and then closes it where the server cannot be reached.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace ddprun::testing {

class RelayProxy {
 public:
  static constexpr size_t kNever = static_cast<size_t>(-1);

  // Relays to 127.0.0.1:`upstream` (0: nowhere yet); flips the bits of the `flip_at`th byte each
  // client sends.
  explicit RelayProxy(uint16_t upstream, size_t flip_at = kNever)
      : upstream_(upstream),
        flip_at_(flip_at),
        acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    boost::asio::co_spawn(io_, accept_loop(), boost::asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~RelayProxy() {
    io_.stop();
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  // Connections accepted from now on go to 127.0.0.1:`upstream`.
  void relay_to(uint16_t upstream) { upstream_ = upstream; }
  // Clients accepted so far, those closed for want of a server included.
  size_t accepted() const { return accepted_; }
  // Waits until `n` clients have been accepted, or `limit` passes; whether they were. (Observes
  // the proxy's state; orders nothing.)
  bool wait_accepted(size_t n, std::chrono::milliseconds limit = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (accepted_ < n) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  // From now on, passes `n` more bytes from clients to the server, and drops the rest.
  void pass_only(size_t n) { pass_left_ = n; }
  // Every byte clients have sent so far, all connections together.
  std::string from_clients() {
    std::lock_guard<std::mutex> lock(mutex_);
    return from_clients_;
  }

 private:
  using Socket = boost::asio::ip::tcp::socket;

  boost::asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, client] =
          co_await acceptor_.async_accept(boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec) co_return;
      ++accepted_;
      auto down = std::make_shared<Socket>(std::move(client));
      auto up = std::make_shared<Socket>(io_);
      auto [cec] =
          co_await up->async_connect({boost::asio::ip::make_address("127.0.0.1"), upstream_.load()},
                                     boost::asio::as_tuple(boost::asio::use_awaitable));
      if (cec) continue;
      boost::asio::co_spawn(io_, pump(down, up, true), boost::asio::detached);
      boost::asio::co_spawn(io_, pump(up, down, false), boost::asio::detached);
    }
  }

  boost::asio::awaitable<void> pump(std::shared_ptr<Socket> from, std::shared_ptr<Socket> to,
                                    bool from_client) {
    char buf[16384];
    size_t seen = 0;
    for (;;) {
      auto [ec, n] = co_await from->async_read_some(
          boost::asio::buffer(buf), boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec) break;
      if (from_client) {
        if (flip_at_ >= seen && flip_at_ < seen + n) buf[flip_at_ - seen] ^= 0xff;
        seen += n;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          from_clients_.append(buf, n);
        }
        const size_t left = pass_left_;
        if (left != kNever) {
          n = std::min(n, left);
          pass_left_ = left - n;
        }
      }
      auto [wec, m] = co_await boost::asio::async_write(
          *to, boost::asio::buffer(buf, n), boost::asio::as_tuple(boost::asio::use_awaitable));
      if (wec) break;
    }
    boost::system::error_code ignored;
    to->shutdown(Socket::shutdown_send, ignored);
  }

  std::atomic<uint16_t> upstream_;
  size_t flip_at_;
  std::atomic<size_t> accepted_{0};
  std::atomic<size_t> pass_left_{kNever};
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::mutex mutex_;
  std::string from_clients_;
  std::thread thread_;
};

}  // namespace ddprun::testing
