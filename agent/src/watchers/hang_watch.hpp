#pragma once
// --hang_timeout: each worker gets a heartbeat file (DDPRUN_HEARTBEAT_FILE) and a progress clock
// (progress_clock.hpp); a heartbeat, a torch timer request, or while it sends no heartbeat a line
// of output, is progress; a worker whose heartbeat file says its program ended is in its exit
// (progress_clock.hpp). A worker without progress for its timeout is hung: the attempt records
// a `hang` event and each hung worker's reason to fail (how long it was silent, not counting the
// node's wait for a CPU), and the group collects the stacks and stops the workers. Under auto, what
// a local rank's clock learned carries over to its next attempt.
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "ddprun/agent/progress_clock.hpp"
#include "watchers/attempt_watcher.hpp"
#include "watchers/heartbeat_file.hpp"

namespace ddprun::agent {

class HangWatch : public AttemptWatcher {
 public:
  // Heartbeat files go in `heartbeat_dir`.
  HangWatch(HangPolicy policy, std::string heartbeat_dir)
      : policy_(policy), dir_(std::move(heartbeat_dir)) {}
  // Each worker's clock (with what its local rank learned before) and heartbeat file.
  void prepare(Attempt& attempt) override;
  // Output is progress until the worker sends a heartbeat; a torch timer request always is.
  void progress(const RunningWorker& worker, WorkerProgress kind,
                std::chrono::steady_clock::time_point now) override;
  // kHang once a running worker is hung (a `hang` event); nothing while the attempt is stopping or
  // after its hang.
  Finding poll(Attempt& attempt, std::chrono::steady_clock::time_point now, EventLog* log) override;

 private:
  // The node's workers' wait for a CPU, a counter that only grows: at each poll, the largest wait
  // any of them added since the previous one.
  std::chrono::nanoseconds node_cpu_wait(Attempt& attempt);

  // One worker of the attempt under way: its clock, its heartbeat file, and whether it has sent a
  // heartbeat (then its output is no longer progress).
  struct Watched {
    ProgressClock clock;
    std::unique_ptr<HeartbeatFile> heartbeat;
    bool heard_beat = false;
  };

  HangPolicy policy_;
  std::string dir_;
  std::map<int, Watched> workers_;                              // by local rank, this attempt's
  std::map<int, std::chrono::steady_clock::duration> learned_;  // by local rank
  std::map<int, std::chrono::nanoseconds> cpu_wait_read_;       // by pid: the last reading
  std::chrono::nanoseconds node_cpu_wait_{0};
};

}  // namespace ddprun::agent
