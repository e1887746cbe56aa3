#pragma once
// Runs one awaitable to completion on a private io_context and returns its result or rethrows its
// exception. Handlers that outlive the operation (a client's idle watchdog timer) stay queued
// without blocking the caller.
#include <chrono>
#include <future>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

namespace ddprun::store {

template <class T>
T run_blocking(boost::asio::io_context& io, boost::asio::awaitable<T> op) {
  std::future<T> result = boost::asio::co_spawn(io, std::move(op), boost::asio::use_future);
  io.restart();
  while (result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) io.run_one();
  return result.get();
}

}  // namespace ddprun::store
