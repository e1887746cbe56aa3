#pragma once
// A StoreServer on a thread (and io_context) of its own. An agent that hosts a store (each round's
// worker store, a static job's store, an agent-hosted c10d store) keeps supervising its workers,
// forwarding signals and heartbeating while thousands of workers storm that store at start-up: the
// storm is served on the other core, not between the agent's events.
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "ddprun/store/store_server.hpp"

namespace ddprun::store {

class StoreThread {
 public:
  // Binds before returning (throws StoreError as StoreServer does), then serves on a new thread.
  explicit StoreThread(ServerOptions options);
  // Stops the server and joins its thread.
  ~StoreThread();
  StoreThread(const StoreThread&) = delete;
  StoreThread& operator=(const StoreThread&) = delete;

  // Fixed once bound: safe from any thread.
  uint16_t port() const { return port_; }
  // Runs f(server) on the store's thread and returns its result: the only way to touch the server
  // from another thread. Blocks the caller for as long as f runs there.
  template <class F>
  auto call(F f) -> decltype(f(std::declval<StoreServer&>())) {
    using R = decltype(f(std::declval<StoreServer&>()));
    std::packaged_task<R()> task([this, &f] { return f(*server_); });
    auto result = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return result.get();
  }
  // StoreServer::stop() on the store's thread; waits for it. Idempotent.
  void stop();
  // CPU time the store's thread has used, in seconds.
  double cpu_seconds() const;

 private:
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<StoreServer> server_;
  uint16_t port_ = 0;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace ddprun::store
