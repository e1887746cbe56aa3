#pragma once
// A worker continuously in uninterruptible sleep (state D) for the timeout makes the node unhealthy
// (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT): the attempt ends as kUnhealthy, naming the worker,
// its kernel wait channel and how long, and the node takes no further part.
#include "watchers/attempt_watcher.hpp"

namespace ddprun::agent {

class StuckWatch : public AttemptWatcher {
 public:
  explicit StuckWatch(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  // kStop once a worker has been in state D for the timeout (a worker_uninterruptible event).
  Finding poll(Attempt& attempt, std::chrono::steady_clock::time_point now, EventLog* log) override;

 private:
  std::chrono::milliseconds timeout_;
};

}  // namespace ddprun::agent
