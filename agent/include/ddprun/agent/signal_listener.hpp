#pragma once
// Signals handled on an io_context: each one that arrives is passed to a handler, on the loop,
// until cancel(). Used by the agent and by the head node for the signals they forward, for their
// whole run: one that arrives after cancel() is dropped, and after destruction ignored for the
// rest of the process (its run is over, and the signal must not kill it while it cleans up: the
// same stop often reaches a node a moment after a peer passed it on).
#include <functional>
#include <optional>
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
  ~SignalListener();
  // No handler runs after this, and no wait is left on the loop (a signal whose completion was
  // already queued when cancel() came is dropped, not waited for again: a wait left on the loop
  // held the agent's shutdown for its 5 s bound).
  void cancel();

 private:
  void listen();

  std::vector<int> signals_;
  std::optional<boost::asio::signal_set> set_;
  std::function<void(int)> handler_;
  bool cancelled_ = false;
};

}  // namespace ddprun::agent
