#pragma once
// A part of the worker group that watches each attempt's running workers (hang detection, the
// uninterruptible-sleep check, the step times): it prepares what the workers need before they
// start, hears of their progress, and the group polls it while they run. It keeps what it knows of
// each worker itself, made afresh for each attempt; what it finds it records in the attempt (a
// worker's reason to fail, the attempt's state) and says what the group must do next. Private to
// the agent.
#include <chrono>

#include "workers/attempt.hpp"

namespace ddprun::agent {

class EventLog;

class AttemptWatcher {
 public:
  // What the group does after a poll.
  enum class Finding {
    kNothing,
    kStop,  // stop the workers (SIGTERM, SIGKILL after the shutdown timeout)
    kHang,  // a hang was declared: collect the stacks (across nodes), then stop the workers
  };

  virtual ~AttemptWatcher() = default;
  // Before the attempt's workers start: what each needs (environment, files).
  virtual void prepare(Attempt& attempt) { (void)attempt; }
  // A worker of the attempt under way made progress the group saw.
  virtual void progress(const RunningWorker& worker, WorkerProgress kind,
                        std::chrono::steady_clock::time_point now) {
    (void)worker, (void)kind, (void)now;
  }
  // While the attempt runs, every poll, stopping or not; what it finds goes to `log` too (may be
  // null).
  virtual Finding poll(Attempt& attempt, std::chrono::steady_clock::time_point now,
                       EventLog* log) = 0;
};

}  // namespace ddprun::agent
