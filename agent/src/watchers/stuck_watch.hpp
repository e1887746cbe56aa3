#pragma once
// A worker continuously in uninterruptible sleep (state D) for the timeout makes the node unhealthy
// (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT): the attempt ends as kUnhealthy, naming the worker,
// its kernel wait channel and how long, and the node takes no further part.
#include <map>
#include <optional>

#include "watchers/attempt_watcher.hpp"

namespace ddprun::agent {

class StuckWatch : public AttemptWatcher {
 public:
  explicit StuckWatch(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  // kStop once a worker has been in state D for the timeout (a worker_uninterruptible event).
  Finding poll(Attempt& attempt, std::chrono::steady_clock::time_point now, EventLog* log) override;

 private:
  std::chrono::milliseconds timeout_;
  uint64_t attempt_ = 0;  // the attempt `d_since_` is of
  // Since when each worker (by local rank) has been in uninterruptible sleep, while it is.
  std::map<int, std::chrono::steady_clock::time_point> d_since_;
};

}  // namespace ddprun::agent
