#pragma once
// One attempt of the local worker group: start every worker, watch them by event, and stop the rest
// at the first failure (or on request): the stop signal to each process group, SIGKILL after the
// shutdown timeout, and every wait bounded.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/agent/progress_clock.hpp"
#include "node/containment.hpp"
#include "watchers/attempt_watcher.hpp"
#include "watchers/file_timer.hpp"
#include "watchers/worker_stacks.hpp"
#include "workers/attempt.hpp"
#include "workers/worker_launch.hpp"

namespace ddprun::agent {

class WarmInterpreter;
class EventLog;

struct GroupResult {
  // kInterrupted: interrupt() ended it (another node's event), no local failure. kUnhealthy: a
  // worker stayed in uninterruptible sleep too long; this node must take no further part.
  enum class State { kSucceeded, kFailed, kStopped, kInterrupted, kUnhealthy };
  State state = State::kSucceeded;
  std::vector<WorkerFailure>
      failures;           // the workers that failed on their own (not those ddprun stopped)
  int stop_signal = 0;    // kStopped: the signal forwarded
  std::string unhealthy;  // kUnhealthy: which worker, in which state and kernel function, how long
  std::string stacks;     // after a hang, with capture_python_stacks: every rank's stack dump
  std::map<int, std::string> frames;  // with the stacks: each rank's innermost frame
  bool hang = false;                  // this node declared a hang in the attempt
  std::vector<int> pids;              // every worker the attempt started
};

class WorkerGroup {
 public:
  // `containment`: where workers' cgroups come from and who hears of their starts and ends; it
  // outlives the group.
  WorkerGroup(boost::asio::io_context& io, std::chrono::milliseconds shutdown_timeout,
              Containment& containment);
  ~WorkerGroup();

  // Runs one attempt to its end. Workers whose exec fails count as failures with exit code 127.
  boost::asio::awaitable<GroupResult> run(std::vector<WorkerLaunch> launches);
  // Forwards `signo` to every running worker's process group; run() then ends with kStopped once
  // they exit (SIGKILL after the shutdown timeout). A second call kills them at once.
  void stop(int signo);
  // Stops the workers (SIGTERM, then SIGKILL after the shutdown timeout) so that the job can
  // restart; run() ends with kInterrupted unless a worker had failed on its own. Called before the
  // next run() (the round ended before its workers started), it is kept for that run(), which then
  // starts no worker and ends with kInterrupted at once: an interruption is never lost.
  void interrupt();
  // A worker continuously in uninterruptible sleep (D state) for `timeout` makes the attempt end
  // as kUnhealthy (its workers stopped); zero: not watched
  // (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT).
  void watch_uninterruptible(std::chrono::milliseconds timeout);
  // --hang_timeout: each worker gets a heartbeat file in `heartbeat_dir` (DDPRUN_HEARTBEAT_FILE);
  // a worker without progress for its timeout (progress_clock.hpp) is hung: a `hang` event, the
  // workers are stopped, and each hung worker is a failure that says how long it was silent.
  void watch_hangs(HangPolicy policy, std::string heartbeat_dir);
  // How the nodes of a multi-node job dump their stacks together on a hang. Each node freezes its
  // workers (SIGSTOP) the moment it declares a hang or hears of one, and makes them dump (SIGABRT,
  // then SIGCONT) only once every node has frozen its own: a rank that dies first cannot make a
  // rank elsewhere fail out of a collective before its stack is taken, since a frozen process
  // handles the pending SIGABRT before it runs again. Each function calls its `then` once done
  // (or once its own bound has passed); the group also goes on by itself after a few seconds.
  struct HangCoordinator {
    std::function<void(std::function<void()> then)> announce;  // tell the other nodes
    std::function<void(std::function<void()> then)> frozen;    // wait for every node to freeze
  };
  // Set for each run(); empty functions: a single node, nobody to wait for.
  void coordinate_hangs_with(HangCoordinator c) { hang_coordinator_ = std::move(c); }
  // Another node declared a hang: as interrupt(), but Python workers dump their stacks first
  // (GroupResult::stacks and frames), as on a hang of this node's own.
  void interrupt_for_stacks();
  // Python workers: they run with PYTHONFAULTHANDLER=1, and on a hang every worker gets SIGABRT
  // first, so that each writes every thread's stack to its stderr; the ranks grouped by innermost
  // frame go into the hung workers' failures, the whole dumps into GroupResult::stacks.
  void capture_python_stacks(bool on) { python_stacks_ = on; }
  // --preload: workers start from `warm` where it can (it outlives the group). Its interpreter
  // starts now, with the shared part of `sample` (any worker's environment) as run() will give it
  // to the workers, so that its imports overlap the rendezvous. Call after the settings above.
  void start_workers_from(WarmInterpreter* warm, Environment sample);
  // Native workers: on a hang, `gdb` (a path; "" none) attaches to each worker in turn, at once
  // and bounded in time, and its backtraces of every thread are the worker's stack; the workers
  // are stopped after. Ignored for Python workers.
  void capture_native_stacks(std::string gdb) { gdb_ = std::move(gdb); }
  // A torch timer request from `pid` (set or cleared): progress, if it is a running worker.
  void progress_of(int pid);
  // Whether `pid` is one of this attempt's running workers.
  bool runs(int pid) const;
  // A torch expiration timer of one of the running workers ran out: the worker gets the timer's
  // signal, and its failure (it is one, whatever its exit) names the timer and the overstay.
  void expire_timer(const ExpiredTimer& timer);
  // Whether an attempt is under way (run() has not returned).
  bool active() const { return active_; }
  // Where workers started and exited are recorded (--event_log); it outlives the group.
  void set_event_log(EventLog* log) { event_log_ = log; }

 private:
  // Variables the watching adds to every worker's environment (PYTHONFAULTHANDLER for stacks).
  void add_watch_variables(Environment& env) const;
  // Starts worker `i` of the attempt (its process, its pumps); false if the machine refused it.
  bool start_worker(size_t i);
  void on_exit(size_t index, const ExitStatus& status);
  void begin_stopping(int signo);
  void kill_survivors();
  void abandon_survivors();
  void watch_states();
  // Polls every watcher and acts on what it finds.
  void poll_watchers();
  // A hang was declared (here): the stacks, across the nodes, then the stop.
  void on_hang();
  // Every running worker's stacks (SIGABRT to Python workers, gdb for native ones), then the usual
  // stop for those still there.
  void dump_stacks_then_stop();
  // Python workers: SIGSTOP each running worker; then, once the other nodes have frozen theirs,
  // dump_stacks_then_stop(). Native workers: dump_stacks_then_stop() at once (gdb reads them).
  void freeze_then_dump();
  // SIGSTOP to every running worker.
  void freeze();
  // Calls `step` once, for this attempt, when `then` is called or after `limit`.
  std::function<void()> once_in_attempt(std::function<void()> step,
                                        std::chrono::milliseconds limit);
  bool captures_stacks() const { return python_stacks_ || !gdb_.empty(); }
  // gdb's backtraces of every running worker, into their native_dump, then the stop.
  boost::asio::awaitable<void> read_native_stacks(uint64_t attempt);
  // Worker `i` of attempt number `attempt`, if that is still the current attempt.
  RunningWorker* worker_of(uint64_t attempt, size_t i);
  // The index of the running worker whose pid this is.
  std::optional<size_t> running_worker(int pid) const;
  void wake();
  void collect_stacks(GroupResult& result);
  // Worker i's stack after a dump (its faulthandler output, or gdb's); nullopt: none.
  std::optional<WorkerStack> stack_of(const RunningWorker& w) const;
  // The ended attempt's result (outside the run() coroutine: g++ 12 warns of a mismatched delete
  // of a coroutine frame that holds it).
  GroupResult conclude();

  boost::asio::io_context& io_;
  std::chrono::milliseconds shutdown_timeout_;
  Containment& containment_;
  boost::asio::steady_timer wake_;
  boost::asio::steady_timer kill_timer_;
  boost::asio::steady_timer state_timer_;
  // The parts that watch each attempt's workers, polled in this order (set before run()).
  std::vector<std::unique_ptr<AttemptWatcher>> watchers_;
  bool watches_hangs_ = false;
  std::string heartbeat_dir_;  // with hangs watched: also where gdb's output goes
  HangCoordinator hang_coordinator_;
  bool python_stacks_ = false;
  WarmInterpreter* warm_ = nullptr;
  std::string gdb_;
  EventLog* event_log_ = nullptr;
  // The current attempt (the last one once run() has returned); null before the first.
  std::unique_ptr<Attempt> attempt_;
  uint64_t attempts_ = 0;  // run()s so far: a late callback for an earlier attempt is ignored
  bool woken_ = false;
  bool active_ = false;
  bool interrupt_pending_ = false;  // interrupt() came before run(): for that run()
};

}  // namespace ddprun::agent
