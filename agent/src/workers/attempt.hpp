#pragma once
// One attempt of the local worker group (one WorkerGroup::run()), and each of its workers as the
// group knows it while it runs. An attempt is made when run() starts and dropped when the next one
// starts: nothing of it is reset by hand. Private to the agent.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/agent/worker_process.hpp"
#include "workers/inprocess_channel.hpp"
#include "workers/worker_launch.hpp"

namespace ddprun::agent {

class LogPump;

// One worker: what it was launched with and, once started, its process, its output and what the
// group knows of its end. What a watcher keeps of it, the watcher keeps (attempt_watcher.hpp).
struct RunningWorker {
  explicit RunningWorker(WorkerLaunch l) : launch(std::move(l)) {}

  WorkerLaunch launch;
  std::unique_ptr<WorkerProcess> process;  // null: not started (the machine refused a process)
  uint64_t serial = 0;         // which process this is, among all the group started (0: none yet)
  bool stopped_by_us = false;  // ddprun signalled it to stop
  // Why ddprun ended it (an expired torch timer, a hang), which makes its exit a failure.
  std::string ended_because;
  std::shared_ptr<LogPump> err_pump;  // its stderr's pump, kept for its stack dump; or null
  std::vector<std::shared_ptr<LogPump>> pumps;  // its teed streams' pumps
  size_t open_pumps = 0;                        // of those, the ones still reading
  std::string native_dump;                      // gdb's output on a hang (native workers)
  // --restart_mode=in_process: its channel (inprocess_channel.hpp), and whether it was asked to
  // abort its attempt (and keep its process for the next one).
  std::unique_ptr<InProcessChannel> channel;
  bool parking = false;
  bool kept = false;  // its process was kept for the next attempt (this is what remains of it)
  std::string parked_stack;  // kept after a hang: its threads' stacks, written before it aborted

  bool running() const { return process && process->running(); }
  // Takes `other`'s process and what goes with it (its serial, pumps and channel): a kept worker
  // or a standby given this worker's place.
  void take_process_of(RunningWorker& other) {
    process = std::move(other.process);
    serial = other.serial;
    pumps = std::move(other.pumps);
    open_pumps = other.open_pumps;
    err_pump = std::move(other.err_pump);
    channel = std::move(other.channel);
  }
};

// What the group sees of a worker that may be progress (a hang watch's heartbeat it reads itself).
enum class WorkerProgress {
  kOutput,      // a line of its output, through the agent
  kTorchTimer,  // a request to torch's expiration timers
};

// When the moments of an attempt that the restart phases are measured between happened, on the
// agent's steady clock (restart_phases.hpp).
struct AttemptTimes {
  using Time = std::chrono::steady_clock::time_point;
  std::optional<Time> started;         // every worker of it was started
  std::optional<Time> failed;          // what ended it happened: a worker's exit, a hang's last
                                       // progress, another node's event
  std::optional<Time> stop_began;      // the agent began stopping the workers for it
  std::optional<Time> first_progress;  // any worker's first heartbeat, torch timer or output
  std::optional<Time> ended;           // its workers were stopped and their output drained
};

// Where an attempt stands. It only moves forward (a move to an earlier phase is ignored: a stop
// already under way is not begun again, and ended workers are not stopped).
enum class AttemptPhase {
  kStarting,       // its workers are being started
  kRunning,        // they run
  kCapturing,      // they are to stop, and their stacks are taken first (a hang)
  kParking,        // they were asked to abort the attempt and keep their processes for the next
                   // (--restart_mode=in_process); any whose timer expired is stopped
  kCapturingHung,  // they parked but for the hung ones, whose stacks are taken before they stop
  kStopping,       // the stop signal was sent (by the agent, or the user's forwarded)
  kKilling,        // SIGKILL was sent to those the shutdown timeout left
  kDraining,       // every worker ended (or parked): their output is read to its end
  kEnded,          // its result was made
};

// Why an attempt's workers were first told to stop (or would be: an interruption after they all
// ended). What the attempt ends as is decided from all that happened by then (GroupResult): the
// user's stop over a worker stuck in the kernel over a failure over another node's event.
enum class StopReason {
  kNone,
  kFailure,      // a worker failed: it exited, its training raised, it could not start, or its
                 // torch timer expired
  kHang,         // this node declared workers hung
  kUnhealthy,    // a worker stayed in uninterruptible sleep too long
  kInterrupted,  // another node's event
  kSignal,       // the agent was asked to stop (Attempt::stop_signal)
};

struct Attempt {
  uint64_t number = 0;                 // WorkerGroup::run()s so far, this one included
  std::vector<RunningWorker> workers;  // one per launch, in the launches' order
  size_t running = 0;                  // started (or kept) workers not yet ended or parked
  AttemptPhase phase = AttemptPhase::kStarting;
  StopReason reason = StopReason::kNone;
  int stop_signal = 0;         // the agent was asked to stop: the signal forwarded
  bool stacks_wanted = false;  // the workers' stacks are collected before they stop
  std::string unhealthy;       // a worker stuck in state D: which, where, how long
  std::vector<WorkerFailure> failures;
  AttemptTimes times;
  // --standby_workers: when every worker was first seen running its training under
  // ddprun.inprocess.
  std::optional<std::chrono::steady_clock::time_point> workers_ready;
  // Called once, at the first progress of any worker of the attempt; may be empty.
  std::function<void(const AttemptTimes&)> on_first_progress;

  // Something that stops the attempt happened: kept where it is the first.
  void cause(StopReason why) {
    if (reason == StopReason::kNone) reason = why;
  }
  // Moves on to `next` where that is forward. A stop's phase (kCapturing to kKilling) records,
  // the first time, when the stop began and, where nothing earlier was known, when the failure
  // happened.
  void enter(AttemptPhase next, AttemptTimes::Time now) {
    if (next >= AttemptPhase::kCapturing && next <= AttemptPhase::kKilling) {
      if (!times.stop_began) times.stop_began = now;
      if (!times.failed) times.failed = now;
    }
    if (next > phase) phase = next;
  }
  // The workers were told to stop (or to park).
  bool stopping() const { return times.stop_began.has_value(); }
  bool hang_declared() const { return reason == StopReason::kHang; }
  // A worker made progress (a heartbeat, a torch timer, a line of output).
  void progress(AttemptTimes::Time now) {
    if (times.first_progress) return;
    times.first_progress = now;
    if (on_first_progress) on_first_progress(times);
  }
};

// What the worker group lets its parts do to an attempt later on (from a timer, or when another
// node answers).
class AttemptControl {
 public:
  // The attempt under way; null between attempts.
  virtual Attempt* running_attempt() = 0;
  // Stops attempt `number`'s workers (SIGTERM, SIGKILL after the shutdown timeout) if it is still
  // under way: where their stacks were being taken, they stop now; where they were already told to
  // stop or park, nothing changes.
  virtual void stop_workers(uint64_t number) = 0;
  // Reaps, as failures of their own, the attempt's workers that have ended but whose end was not
  // noticed yet (a rank killed a moment before its peer died of the broken connection): call it
  // before marking workers as stopped by ddprun, which would lose the failure that caused the rest.
  virtual void count_ended_workers() = 0;
  // `worker`, of the attempt under way, made progress (told to the attempt and its watchers).
  virtual void worker_progress(const RunningWorker& worker, WorkerProgress kind) = 0;

 protected:
  ~AttemptControl() = default;
};

}  // namespace ddprun::agent
