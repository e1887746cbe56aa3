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
#include "watchers/stack_capture.hpp"
#include "watchers/step_watch.hpp"
#include "watchers/torch_timers.hpp"
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
  AttemptTimes times;                 // for the restart phases
};

class WorkerGroup : private AttemptControl {
 public:
  // How long a standby's start may take to end before an attempt's start or the job's end goes on
  // without waiting for it: longer than the warm interpreter's limit on an answer to a fork.
  static constexpr std::chrono::seconds kStandbyStartLimit{20};

  // `containment`: where workers' cgroups come from and who hears of their starts and ends; it
  // outlives the group.
  WorkerGroup(boost::asio::io_context& io, std::chrono::milliseconds shutdown_timeout,
              Containment& containment);
  ~WorkerGroup();

  // Runs one attempt to its end. Workers whose exec fails count as failures with exit code 127.
  boost::asio::awaitable<GroupResult> run(std::vector<WorkerLaunch> launches);
  // Forwards `signo` to every running worker's process group; run() then ends with kStopped once
  // they exit (SIGKILL after the shutdown timeout). A second call kills them at once. Before run()
  // has started its workers (a peer's stop that came while it waited for the warm interpreter),
  // that run() starts none and ends stopped.
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
  // workers are stopped, and each hung worker is a failure that says how long it was silent. With
  // `python_stacks` (Python workers) or a `gdb` path (native ones; "" none), every worker's stack
  // is taken first: the ranks grouped by innermost frame go into the hung workers' failures, the
  // whole dumps into GroupResult::stacks (stack_capture.hpp).
  void watch_hangs(HangPolicy policy, std::string heartbeat_dir, bool python_stacks,
                   std::string gdb);
  // The straggler check: each worker gets a step times file in `dir` (DDPRUN_STEP_TIMES_FILE), read
  // into `samples` while it runs (step_watch.hpp).
  void watch_steps(std::string dir, std::shared_ptr<StepSamples> samples);
  // Set for each run(); empty functions: a single node, nobody to wait for (stack_capture.hpp).
  void coordinate_hangs_with(HangCoordinator c) { stacks_.coordinate_with(std::move(c)); }
  // Another node declared a hang: as interrupt(), but the workers' stacks are taken first
  // (GroupResult::stacks and frames), as on a hang of this node's own.
  void interrupt_for_stacks();
  // --preload: workers start from `warm` where it can (it outlives the group). Its interpreter
  // starts now, with the shared part of `sample` (any worker's environment) as run() will give it
  // to the workers, so that its imports overlap the rendezvous. Call after the settings above.
  void start_workers_from(WarmInterpreter* warm, Environment sample);
  // torch's expiration timers (TORCHELASTIC_TIMER_FILE) for this group's workers: serves the FIFO
  // at `path` (torch_timers.hpp), recording to the event log set before. Throws
  // std::runtime_error when it cannot.
  void serve_torch_timers(std::string path);
  // Stops serving them and removes the FIFO.
  void close_torch_timers() { timers_.reset(); }
  // Called once per attempt, at the first progress of any of its workers (a heartbeat, a torch
  // timer, a line of output through the agent), with the attempt's times so far.
  void on_first_progress(std::function<void(const AttemptTimes&)> f) {
    on_first_progress_ = std::move(f);
  }
  // --restart_mode=in_process: each worker gets a channel in `dir` (DDPRUN_INPROCESS_FILE,
  // inprocess_channel.hpp). Where every running worker said it can restart in process, what would
  // stop the workers (a failure, a hang, another node's event) stops only the failed or hung
  // ones; the others abort their attempt and wait, and run() ends once they do. The next run()
  // gives each kept worker its new environment instead of starting a process, and starts the
  // rest. A worker that has not aborted within the shutdown timeout is stopped.
  void restart_in_process(std::string dir) { inprocess_dir_ = std::move(dir); }
  // --standby_workers (with restart_in_process): `count` standby processes beside the workers
  // (standby_launch.hpp), started from the running attempt's first worker's launch kStandbyDelay
  // after every worker was seen running its training under ddprun.inprocess (a standby's start
  // does not compete with the workers' own), or on a spare node while it waits
  // (stand_by_as_spare). A later attempt gives a worker whose process is gone
  // a ready standby's process, with the worker's environment through the channel and its console
  // routing, instead of starting one. Not where the workers' command lines differ (a
  // ${local_rank} argument a standby could not change) or their CUDA_VISIBLE_DEVICES do. A standby
  // that ends on its own is not replaced: workers start as new processes from then on, and the log
  // says why.
  void keep_standbys(int count) { standby_count_ = count; }
  // --standby_workers on a spare node (Rendezvous::on_spare), while no attempt is under way: the
  // standbys start from `sample` (this node's launches as if it were in a round; only what every
  // worker shares is used), one after the other and, under --preload, once the warm interpreter
  // has imported, so that the ranks of a node this one replaces start in warm processes. As
  // beside an attempt, none starts where the launches' command lines, devices or output routes
  // differ. The next run() ends it (its standbys stay).
  void stand_by_as_spare(std::vector<WorkerLaunch> sample);
  // Whether a spare's sample is held (stand_by_as_spare() since the last run()).
  bool standing_by_as_spare() const { return !spare_sample_.empty(); }
  // In process, called once a worker of this node failed and the others began to park: for the
  // other nodes to hear of it now rather than once they have (failure_reports::announce). Set for
  // each run().
  void on_failure_in_process(std::function<void()> f) { on_failure_in_process_ = std::move(f); }
  // Called once per run(), when its workers begin to stop or park before all ended on their own
  // (a failure, a hang, an interruption, a signal): for what should leave the machine to their
  // exit and the restart (the checkpoint copies). Kept across run()s.
  void on_stopping(std::function<void()> f) { on_stopping_ = std::move(f); }
  // Whether a standby's start is under way (it may be using the warm interpreter).
  bool standby_starting() const { return standby_starting_; }
  // Ends the workers kept for a next attempt that will not come (the job ends here), and the
  // standbys: `signo`, then SIGKILL after the shutdown timeout; completes once they exited
  // (bounded).
  boost::asio::awaitable<void> end_kept(int signo);
  // The next run() restores no agreed checkpoint step (none was saved by every rank, or the job
  // saves none through ddprun.checkpoint): each of its ranks must start from what a new process
  // holds. The workers kept from the last attempt (holding that attempt's training state) end
  // first, as a process restart's would (SIGTERM, SIGKILL after the shutdown timeout; bounded),
  // and no standby (holding what its warm-up changed) takes a place in that run(). Returns the
  // pids of the kept workers it ended.
  boost::asio::awaitable<std::vector<int>> start_afresh();
  // Whether an attempt is under way (run() has not returned).
  bool active() const { return active_; }
  // Where workers started and exited are recorded (--event_log); it outlives the group.
  void set_event_log(EventLog* log) { event_log_ = log; }

 private:
  // After SIGKILL, how long a worker may take to die before ddprun stops waiting for it (a process
  // in uninterruptible sleep dies only when the kernel lets it).
  static constexpr std::chrono::seconds kKillGrace{5};
  // How long after every worker of an attempt runs its training a standby starts beside them.
  static constexpr std::chrono::seconds kStandbyDelay{2};
  // How often a wait for a standby's start to end looks.
  static constexpr std::chrono::milliseconds kStandbyPoll{10};
  // How often a spare node looks whether a standby can start.
  static constexpr std::chrono::milliseconds kSparePoll{100};
  // How long a round's first workers, or a spare node's standbys, wait for the warm interpreter's
  // imports (--preload); cold starts after that.
  static constexpr std::chrono::seconds kWarmReadyLimit{60};

  // Starts worker `i` of the attempt (its process, its pumps); false if the machine refused it.
  boost::asio::awaitable<bool> start_worker(size_t i);
  // A worker that started after its attempt began to stop (the warm interpreter answered late)
  // gets the stop the others got.
  void stop_late_worker(RunningWorker& rw);
  // Gives worker `i` of the attempt the kept process of the same local rank, if there is one.
  bool adopt_kept(size_t i);
  // Tells `w` (a kept worker or a ready standby) to run the attempt under way with `env` (given
  // its channel's path); false where its channel cannot carry that (a value that is not UTF-8,
  // /dev/shm full): its process is then killed, for a new one to take the place.
  bool told_to_resume(RunningWorker& w, Environment& env);
  // Starts `rw`'s process (through the warm interpreter where there is one, given up where
  // `wanted` no longer holds when it answers: rw.process stays null), its pumps and its exit's
  // watch. Throws std::system_error where the machine refuses a process.
  boost::asio::awaitable<void> spawn(RunningWorker& rw, std::function<bool()> wanted);
  // Gives worker `i` of the attempt a ready standby's process, if there is one.
  bool adopt_standby(size_t i);
  // The launches a standby is made from now: the attempt's, or a spare node's sample (empty:
  // none yet).
  std::vector<const WorkerLaunch*> standby_samples() const;
  // Whether a standby may start now (keep_standbys); where none ever may, no_standbys_ says why.
  bool standby_wanted();
  // Whether standbys can follow the workers `launches` (their command lines, devices and output
  // routes); where not, no_standbys_ says why (and the log, once).
  bool standbys_can_follow(const std::vector<const WorkerLaunch*>& launches);
  // A spare node's standbys: starts one where one is wanted, and looks again a while later until
  // they all run or an attempt begins.
  void stand_by_while_spare();
  // Starts a standby where one is wanted now.
  void top_up_standbys();
  // Completes once no standby's start is under way (bounded).
  boost::asio::awaitable<void> standby_start_ended();
  // kept_'s workers: `signo`, then SIGKILL after the shutdown timeout; completes once they exited
  // (bounded), kept_ empty.
  boost::asio::awaitable<void> end_kept_workers(int signo);
  // Whether process `serial` was a standby (its end is then dealt with).
  bool standby_ended(uint64_t serial, const ExitStatus& status);
  void on_exit(uint64_t serial, const ExitStatus& status);
  // What a failure, a hang or an interruption does: the workers stop, or (in process, where they
  // all can) the failed ones stop and the others abort their attempt.
  void end_attempt();
  // Whether every running worker runs its training under ddprun.inprocess (`hung_too`: the hung
  // ones counted; else they stop anyway).
  bool all_can_restart_in_process(bool hung_too);
  // Asks the workers to abort their attempt, and gives them `limit` to do so.
  void begin_parking(std::chrono::milliseconds limit);
  // on_stopping's call, once per run().
  void stopping_began();
  // While workers are asked to abort (or may say their training raised): who did.
  void watch_in_process();
  void poll_in_process();
  void begin_stopping(int signo);
  // SIGKILLs the workers still running (not those parking) once the shutdown timeout passes.
  void kill_after_shutdown_timeout();
  void kill_survivors();
  void abandon_survivors();
  void watch_states();
  // Polls every watcher and acts on what it finds.
  void poll_watchers();
  // The worker started as `serial`, in the attempt under way (null: not there).
  RunningWorker* worker_of(uint64_t serial);
  // The workers' pumps still reading, in the attempt.
  size_t open_pumps() const;
  void wake();
  // The ended attempt's result (outside the run() coroutine: g++ 12 warns of a mismatched delete
  // of a coroutine frame that holds it).
  GroupResult conclude();
  Attempt* running_attempt() override { return active_ ? attempt_.get() : nullptr; }
  void stop_workers(uint64_t number) override;
  void count_ended_workers() override;
  void worker_progress(const RunningWorker& worker, WorkerProgress kind) override;

  boost::asio::io_context& io_;
  std::chrono::milliseconds shutdown_timeout_;
  Containment& containment_;
  boost::asio::steady_timer wake_;
  boost::asio::steady_timer kill_timer_;
  bool kill_armed_ = false;      // kill_timer_ waits to SIGKILL the survivors of a stop
  bool counting_ended_ = false;  // count_ended_workers() is under way
  boost::asio::steady_timer state_timer_;
  boost::asio::steady_timer inprocess_timer_;
  // The parts that watch each attempt's workers, polled in this order (set before run()).
  std::vector<std::unique_ptr<AttemptWatcher>> watchers_;
  StackCapture stacks_;  // on a hang (with hangs watched)
  std::unique_ptr<TorchTimers> timers_;
  WarmInterpreter* warm_ = nullptr;
  EventLog* event_log_ = nullptr;
  std::function<void(const AttemptTimes&)> on_first_progress_;
  // The current attempt (the last one once run() has returned); null before the first.
  std::unique_ptr<Attempt> attempt_;
  uint64_t attempts_ = 0;  // run()s so far
  uint64_t serials_ = 0;   // worker processes started so far
  // --restart_mode=in_process: the channels' folder ("" not in process), the workers kept from the
  // last attempt for the next, until when the attempt's workers may take to abort, and whether the
  // log said that these workers cannot restart in process.
  std::string inprocess_dir_;
  std::vector<RunningWorker> kept_;
  std::chrono::steady_clock::time_point parking_deadline_;
  bool said_not_in_process_ = false;
  bool afresh_ = false;  // start_afresh(): the next run() adopts no standby
  std::function<void()> on_failure_in_process_;
  std::function<void()> on_stopping_;
  bool stopping_told_ = false;  // on_stopping_ was called in this run()
  // --standby_workers: how many, those started (running or not), whether one is starting, and
  // why no more start ("" they do).
  int standby_count_ = 0;
  std::vector<RunningWorker> standbys_;
  uint64_t standbys_started_ = 0;
  bool standby_starting_ = false;
  std::string no_standbys_;
  std::vector<WorkerLaunch> spare_sample_;  // stand_by_as_spare()'s, until the next run()
  boost::asio::steady_timer spare_timer_;
  bool woken_ = false;
  bool active_ = false;
  bool interrupt_pending_ = false;  // interrupt() came before run(): for that run()
  int stop_pending_ = 0;  // stop() came before run() made the group active: for that run()
};

}  // namespace ddprun::agent
