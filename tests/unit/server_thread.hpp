#pragma once
// A StoreServer on loopback, port chosen by the OS, running on its own thread for the test's
// lifetime.
#include <future>
#include <memory>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "ddprun/store/store_server.hpp"

namespace ddprun::testing {

class ServerThread {
 public:
  explicit ServerThread(store::ServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<store::StoreServer>(io_, options);
    port_ = server_->port();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~ServerThread() {
    boost::asio::post(io_, [this] {
      server_->stop();
      io_.stop();
    });
    thread_.join();
  }
  uint16_t port() const { return port_; }

  // Runs `f(server)` on the server's thread and returns its result.
  template <class F>
  auto call(F f) {
    std::packaged_task<decltype(f(*server_))()> task([&] { return f(*server_); });
    auto result = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return result.get();
  }

  // Polls `pred(server)` on the server's thread until it holds or `limit` passes; returns the last
  // answer. For observing server state, never for ordering events.
  template <class Pred>
  bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (call(pred)) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  boost::asio::io_context io_;
  std::unique_ptr<store::StoreServer> server_;
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace ddprun::testing
