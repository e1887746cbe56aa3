#pragma once
// Signals handled on an io_context: each one that arrives is passed to a handler, on the loop,
// until cancel() (or destruction). Used by the agent and by the head node for the signals they
// forward.
#include <functional>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

namespace ddprun::agent {

class SignalListener {
 public:
  SignalListener(boost::asio::io_context& io, const std::vector<int>& signals,
                 std::function<void(int signo)> handler);
  SignalListener(const SignalListener&) = delete;
  SignalListener& operator=(const SignalListener&) = delete;
  // No handler runs after this.
  void cancel();

 private:
  void listen();

  boost::asio::signal_set set_;
  std::function<void(int)> handler_;
};

}  // namespace ddprun::agent
