#include "workers/worker_group.hpp"

#include <algorithm>
#include <csignal>
#include <fstream>
#include <optional>
#include <tuple>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/agent/signals.hpp"
#include "logs/event_log.hpp"
#include "logs/log_pump.hpp"
#include "logs/python_traceback.hpp"
#include "watchers/hang_watch.hpp"
#include "watchers/proc_state.hpp"
#include "watchers/stuck_watch.hpp"
#include "workers/warm_interpreter.hpp"

namespace ddprun::agent {
namespace {
// How long teed output may keep arriving after every worker has exited (a stray process that left
// the worker's process group may hold the pipe).
constexpr auto kPumpDrain = std::chrono::seconds(2);
// How much of a worker's stderr is kept for its stack dump.
constexpr size_t kStackTail = 256 * 1024;
// ... and otherwise, for the exception it died of.
constexpr size_t kTracebackTail = 64 * 1024;
// In process, how long after a hang the ranks may take to abort their attempt: those that have not
// by then are the hung ones.
constexpr std::chrono::milliseconds kHangAbortGrace{2000};
// How often workers' states, heartbeats and silences are looked at, when they are watched.
constexpr auto kStatePoll = std::chrono::milliseconds(100);

// The last `bytes` of the file at `path` ("" where it cannot be read).
std::string file_tail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const std::streamoff size = in.tellg();
  const std::streamoff from =
      std::max<std::streamoff>(0, size - static_cast<std::streamoff>(bytes));
  in.seekg(from);
  std::string out(static_cast<size_t>(size - from), '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<size_t>(in.gcount()));
  return out;
}

// A Python worker that failed without an error file (no torch @record): the exception it died of,
// read back from the end of its stderr (through the agent, or in its --redirects file).
void explain_from_stderr(WorkerFailure& f, const RunningWorker& w) {
  if (f.error || f.exitcode <= 0 || !f.ended_because.empty()) return;
  const std::string tail = w.err_pump ? w.err_pump->tail()
                           : w.launch.spawn.err.kind == StreamTarget::Kind::kFile
                               ? file_tail(w.launch.spawn.err.path, kTracebackTail)
                               : std::string();
  if (std::optional<PythonTraceback> tb = last_python_traceback(tail)) {
    f.error = ErrorRecord{std::move(tb->exception), std::move(tb->traceback), {}, {}};
  }
}
}  // namespace

WorkerGroup::WorkerGroup(boost::asio::io_context& io, std::chrono::milliseconds shutdown_timeout,
                         Containment& containment)
    : io_(io),
      shutdown_timeout_(shutdown_timeout),
      containment_(containment),
      wake_(io),
      kill_timer_(io),
      state_timer_(io),
      inprocess_timer_(io),
      stacks_(io, containment, *this),
      spare_timer_(io) {}

WorkerGroup::~WorkerGroup() {
  if (attempt_) {
    for (RunningWorker& w : attempt_->workers) {
      for (auto& p : w.pumps) p->finish();
    }
  }
  for (std::vector<RunningWorker>* kept : {&kept_, &standbys_}) {
    for (RunningWorker& w : *kept) {
      if (w.running()) w.process->signal_group(SIGKILL);
      for (auto& p : w.pumps) p->finish();
    }
  }
}

void WorkerGroup::wake() {
  woken_ = true;
  wake_.cancel();
}

void WorkerGroup::watch_uninterruptible(std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) watchers_.push_back(std::make_unique<StuckWatch>(timeout));
}

void WorkerGroup::watch_hangs(HangPolicy policy, std::string heartbeat_dir, bool python_stacks,
                              std::string gdb) {
  if (policy.mode == HangPolicy::Mode::kOff) return;
  stacks_.capture(python_stacks, std::move(gdb), heartbeat_dir);
  watchers_.push_back(std::make_unique<HangWatch>(policy, std::move(heartbeat_dir)));
}

void WorkerGroup::watch_steps(std::string dir, std::shared_ptr<StepSamples> samples) {
  watchers_.push_back(std::make_unique<StepWatch>(std::move(dir), std::move(samples)));
}

void WorkerGroup::serve_torch_timers(std::string path) {
  AttemptControl& control = *this;
  timers_ = std::make_unique<TorchTimers>(io_, std::move(path), control, event_log_);
}

void WorkerGroup::start_workers_from(WarmInterpreter* warm, Environment sample) {
  warm_ = warm;
  if (warm_ == nullptr) return;
  stacks_.add_variables(sample);
  warm_->prepare(shared_part(sample));
}

boost::asio::awaitable<GroupResult> WorkerGroup::run(std::vector<WorkerLaunch> launches) {
  // One use at a time of the warm interpreter: a standby's start may be under way.
  spare_sample_.clear();  // (a spare no more)
  spare_timer_.cancel();
  co_await standby_start_ended();
  const bool afresh = std::exchange(afresh_, false);  // (this run()'s, even one ended at once)
  attempt_ = std::make_unique<Attempt>();
  attempt_->number = ++attempts_;
  stopping_told_ = false;
  attempt_->on_first_progress = on_first_progress_;
  for (WorkerLaunch& l : launches) attempt_->workers.emplace_back(std::move(l));
  for (auto& watcher : watchers_) watcher->prepare(*attempt_);
  stacks_.prepare(*attempt_);
  if (warm_ != nullptr && !attempt_->workers.empty()) {
    warm_->prepare(shared_part(attempt_->workers.front().launch.spawn.env));
    co_await warm_->ready(kWarmReadyLimit);
    co_await warm_->answering(kWarmReadyLimit);
  }
  if (std::exchange(interrupt_pending_, false)) {
    GroupResult result;
    result.state = GroupResult::State::kInterrupted;
    co_return result;
  }
  active_ = true;
  if (const int signo = std::exchange(stop_pending_, 0); signo != 0) stop(signo);

  // (A stop, or a failure of a worker started first, may come while the warm interpreter forks.)
  for (size_t i = 0; i < attempt_->workers.size() && !attempt_->stopping(); ++i) {
    if (!adopt_kept(i) && (afresh || !adopt_standby(i)) && !co_await start_worker(i)) break;
  }
  for (RunningWorker& w : kept_) {
    const auto has = [&w](const RunningWorker& r) {
      return r.launch.id.local_rank == w.launch.id.local_rank;
    };
    // A local rank this attempt does not have goes; one it did not adopt (a stop began before its
    // turn) stays kept for the next.
    if (w.running() && std::none_of(attempt_->workers.begin(), attempt_->workers.end(), has)) {
      w.process->signal_group(SIGKILL);
    }
  }
  attempt_->times.started = std::chrono::steady_clock::now();
  attempt_->enter(AttemptPhase::kRunning, *attempt_->times.started);
  if (event_log_ != nullptr) {
    nlohmann::json started = nlohmann::json::array();
    for (const RunningWorker& w : attempt_->workers) {
      if (!w.process) continue;
      started.push_back({{"local_rank", w.launch.id.local_rank},
                         {"rank", w.launch.id.rank},
                         {"pid", w.process->pid()}});
    }
    event_log_->record("workers_started", {{"workers", std::move(started)}});
  }

  if (!watchers_.empty()) watch_states();
  if (!inprocess_dir_.empty()) watch_in_process();
  boost::asio::steady_timer drain(io_);
  while (attempt_->running > 0 || open_pumps() > 0) {
    if (attempt_->running == 0 && attempt_->phase != AttemptPhase::kDraining) {
      attempt_->enter(AttemptPhase::kDraining, std::chrono::steady_clock::now());
      drain.expires_after(kPumpDrain);
      drain.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        for (RunningWorker& w : attempt_->workers) {
          for (auto& p : w.pumps) p->finish();
        }
      });
    }
    if (!woken_) {
      wake_.expires_at(boost::asio::steady_timer::time_point::max());
      co_await wake_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    woken_ = false;
  }
  co_await standby_start_ended();  // (a standby reported but not yet registered is no orphan)
  drain.cancel();
  kill_timer_.cancel();
  kill_armed_ = false;
  state_timer_.cancel();
  inprocess_timer_.cancel();
  containment_.kill_orphans();  // what the workers left behind, orphaned
  active_ = false;
  attempt_->times.ended = std::chrono::steady_clock::now();
  attempt_->enter(AttemptPhase::kEnded, *attempt_->times.ended);

  co_return conclude();
}

boost::asio::awaitable<bool> WorkerGroup::start_worker(size_t i) {
  Attempt& a = *attempt_;
  RunningWorker& rw = a.workers[i];
  WorkerLaunch& l = rw.launch;
  try {
    if (!inprocess_dir_.empty()) {
      rw.channel = std::make_unique<InProcessChannel>(inprocess_dir_, l.id.local_rank);
      rw.channel->started(a.number);  // (a full /dev/shm throws)
      l.spawn.env["DDPRUN_INPROCESS_FILE"] = rw.channel->path();
    }
    co_await spawn(rw, [&a] { return !a.stopping(); });
  } catch (const std::system_error& e) {
    // The machine refused a process (or its in-process file: /dev/shm full): stop what started
    // and report it like a failed worker.
    spdlog::error("cannot start local rank {}: {}", l.id.local_rank, e.what());
    WorkerFailure f;
    f.local_rank = l.id.local_rank;
    f.rank = l.id.rank;
    f.exitcode = 127;
    f.time = std::chrono::system_clock::now();
    f.error = ErrorRecord{e.what(), {}, {}, {}};
    a.failures.push_back(std::move(f));
    a.cause(StopReason::kFailure);
    if (!a.stopping()) begin_stopping(SIGTERM);
    co_return false;
  }
  if (!rw.process) co_return false;  // the attempt began to stop while the warm interpreter forked
  ++a.running;
  if (a.stopping()) stop_late_worker(rw);
  co_return true;
}

boost::asio::awaitable<void> WorkerGroup::spawn(RunningWorker& rw, std::function<bool()> wanted) {
  const WorkerLaunch& l = rw.launch;
  // Its log files before it starts (an open that fails is a worker that could not start).
  const auto log_file = [](const StreamTarget& stream, const TeeTarget& tee) {
    return open_log_file(stream.kind == StreamTarget::Kind::kPipe ? tee.file : std::string());
  };
  LogFile out_file = log_file(l.spawn.out, l.tee_out);
  LogFile err_file = log_file(l.spawn.err, l.tee_err);
  const Containment::ReapingHold held = containment_.hold_reaping();  // (until it is registered)
  // (An if, not ?:: with a co_await in a conditional expression, GCC 12's code crashed here.)
  if (warm_ != nullptr) {
    rw.process = co_await WorkerProcess::start(io_, l.spawn, containment_.worker_cgroup(), *warm_,
                                               std::move(wanted));
  } else {
    rw.process = std::make_unique<WorkerProcess>(io_, l.spawn, containment_.worker_cgroup());
  }
  if (!rw.process) co_return;
  WorkerProcess& w = *rw.process;
  containment_.started(w.pid(), w.cgroup_path());
  const uint64_t serial = rw.serial = ++serials_;
  for (auto [fd, target, file] : {std::tuple{w.take_stdout_pipe(), &l.tee_out, &out_file},
                                  std::tuple{w.take_stderr_pipe(), &l.tee_err, &err_file}}) {
    if (fd < 0) continue;
    auto pump =
        std::make_shared<LogPump>(io_, fd, std::move(*file), target->console_fd,
                                  target->raw ? std::string() : l.prefix, target->duplicate);
    pump->set_on_output([this, serial] {
      if (const RunningWorker* worker = worker_of(serial)) {
        worker_progress(*worker, WorkerProgress::kOutput);
      }
    });
    if (target == &l.tee_err) {  // for a hang's stacks, and the exception a worker died of
      pump->keep_tail(stacks_.reads_stderr() ? kStackTail : kTracebackTail);
      rw.err_pump = pump;
    }
    ++rw.open_pumps;
    pump->start([this, serial] {
      const auto ended = [serial](std::vector<RunningWorker>& workers) {
        for (RunningWorker& w : workers) {
          if (w.serial == serial && w.open_pumps > 0) --w.open_pumps;
        }
      };
      if (attempt_) ended(attempt_->workers);
      ended(kept_);
      ended(standbys_);
      wake();
    });
    rw.pumps.push_back(std::move(pump));
  }
  w.watch_exit([this, serial](const ExitStatus& s) { on_exit(serial, s); });
}

void WorkerGroup::stop_late_worker(RunningWorker& rw) {
  switch (attempt_->phase) {
    case AttemptPhase::kCapturing:
    case AttemptPhase::kCapturingHung:
      return;  // the stop that follows the capture reaches it with the others
    case AttemptPhase::kKilling:
      rw.stopped_by_us = true;
      rw.process->signal_group(SIGKILL);
      return;
    default:
      rw.stopped_by_us = true;
      rw.process->signal_group(attempt_->stop_signal != 0 ? attempt_->stop_signal : SIGTERM);
      if (!kill_armed_) kill_after_shutdown_timeout();
      return;
  }
}

RunningWorker* WorkerGroup::worker_of(uint64_t serial) {
  if (!attempt_ || !active_) return nullptr;
  for (RunningWorker& w : attempt_->workers) {
    if (w.serial == serial && w.process) return &w;
  }
  return nullptr;
}

size_t WorkerGroup::open_pumps() const {
  size_t open = 0;
  for (const RunningWorker& w : attempt_->workers) open += w.open_pumps;
  return open;
}

GroupResult WorkerGroup::conclude() {
  Attempt& a = *attempt_;
  GroupResult result;
  for (WorkerFailure& f : a.failures) {
    for (const RunningWorker& w : a.workers) {
      if (w.launch.id.local_rank == f.local_rank) explain_from_stderr(f, w);
    }
  }
  result.failures = std::move(a.failures);
  result.stop_signal = a.stop_signal;
  result.unhealthy = a.unhealthy;
  result.hang = a.hang_declared();
  result.times = a.times;
  for (const RunningWorker& w : a.workers) {
    if (w.process) result.pids.push_back(w.process->pid());
  }
  if (a.stacks_wanted) {
    AttemptStacks stacks = stacks_.collect(a);
    result.stacks = std::move(stacks.text);
    result.frames = std::move(stacks.frames);
  }
  if (a.stop_signal != 0) {
    result.state = GroupResult::State::kStopped;
  } else if (!a.unhealthy.empty()) {
    result.state = GroupResult::State::kUnhealthy;
  } else if (!result.failures.empty() || a.reason == StopReason::kFailure ||
             a.reason == StopReason::kHang) {
    // (a hung worker that survived SIGKILL left no failure of its own: the attempt failed still)
    result.state = GroupResult::State::kFailed;
  } else if (a.reason == StopReason::kInterrupted) {
    result.state = GroupResult::State::kInterrupted;
  }
  // The processes and pumps go now; what a late callback may look at stays until the next run().
  for (RunningWorker& w : a.workers) {
    w.process.reset();
    w.err_pump.reset();
    w.pumps.clear();
  }
  return result;
}

void WorkerGroup::on_exit(uint64_t serial, const ExitStatus& status) {
  RunningWorker* in_attempt = worker_of(serial);
  if (in_attempt == nullptr && standby_ended(serial, status)) return;
  if (in_attempt == nullptr) {  // a kept worker ended between attempts: the next one starts anew
    for (const RunningWorker& w : kept_) {
      if (w.serial != serial) continue;
      containment_.ended(w.process->pid());
      if (w.launch.id.local_rank < 0) continue;  // a standby, ended with the job
      spdlog::warn("local rank {} (pid {}) ended while kept for the next attempt ({} {})",
                   w.launch.id.local_rank, w.process->pid(),
                   status.code >= 0 ? "exit code" : "signal",
                   status.code >= 0 ? std::to_string(status.code) : signal_name(-status.code));
    }
    wake();
    return;
  }
  Attempt& a = *attempt_;
  --a.running;
  const RunningWorker& rw = *in_attempt;
  const WorkerLaunch& l = rw.launch;
  const WorkerProcess& w = *rw.process;
  containment_.ended(w.pid());
  const bool ended_by_us = !rw.ended_because.empty();
  if (event_log_ != nullptr) {
    nlohmann::json exited = {{"local_rank", l.id.local_rank},
                             {"rank", l.id.rank},
                             {"pid", w.pid()},
                             {"stopped_by_ddprun", rw.stopped_by_us}};
    if (status.code >= 0) {
      exited["exitcode"] = status.code;
    } else {
      exited["signal"] = signal_name(-status.code);
      exited["oom_killed"] = status.oom_killed;
      // A SIGKILL ddprun did not send usually comes from the kernel's OOM killer.
      exited["oom_hint"] = status.oom_killed || (-status.code == SIGKILL &&
                                                 a.phase != AttemptPhase::kKilling && !ended_by_us);
    }
    event_log_->record("worker_exited", std::move(exited));
  }
  // (A worker whose training raised in process is a failure already: its exit is not another.)
  const bool counted = std::any_of(a.failures.begin(), a.failures.end(),
                                   [&](const WorkerFailure& f) { return f.pid == w.pid(); });
  if (!counted && (ended_by_us || (status.code != 0 && !rw.stopped_by_us))) {
    WorkerFailure f;
    f.local_rank = l.id.local_rank;
    f.rank = l.id.rank;
    f.pid = w.pid();
    f.exitcode = status.code;
    f.time = status.time;
    f.sigkill_sent_by_ddprun = a.phase == AttemptPhase::kKilling || ended_by_us;
    f.oom_killed = status.oom_killed;
    f.ended_because = rw.ended_because;
    if (!w.exec_error().empty()) {
      f.error = ErrorRecord{w.exec_error(), {}, {}, {}};
    } else if ((f.error = read_error_file(l.error_file))) {
      f.error_file = l.error_file;
    }
    spdlog::warn("worker local_rank {} (rank {}, pid {}) failed: exit code {}", f.local_rank,
                 f.rank, f.pid, f.exitcode);
    a.failures.push_back(std::move(f));
    a.cause(StopReason::kFailure);
    if (!a.stopping()) end_attempt();
  }
  wake();
}

void WorkerGroup::end_attempt() {
  if (counting_ended_) return;  // (the call counting them ends the attempt once they are counted)
  Attempt& a = *attempt_;
  switch (a.phase) {
    case AttemptPhase::kStarting:
    case AttemptPhase::kRunning:
    case AttemptPhase::kCapturing:
      count_ended_workers();
      if (all_can_restart_in_process(false)) {
        begin_parking(shutdown_timeout_);
        if (a.reason == StopReason::kFailure && on_failure_in_process_) on_failure_in_process_();
      } else {
        begin_stopping(SIGTERM);
      }
      return;
    case AttemptPhase::kCapturingHung:  // the stacks of the hung ranks were taken: they stop now
      begin_stopping(SIGTERM);
      return;
    case AttemptPhase::kParking:
    case AttemptPhase::kStopping:
    case AttemptPhase::kKilling:
    case AttemptPhase::kDraining:
    case AttemptPhase::kEnded:
      return;  // (under way, or nothing left to stop)
  }
}

void WorkerGroup::count_ended_workers() {
  if (!active_ || counting_ended_) return;
  counting_ended_ = true;
  struct Counted {
    bool& counting;
    ~Counted() { counting = false; }
  } counted{counting_ended_};
  for (RunningWorker& w : attempt_->workers) {
    if (w.running()) w.process->reap_if_exited();
  }
}

void WorkerGroup::stopping_began() {
  if (!std::exchange(stopping_told_, true) && on_stopping_) on_stopping_();
}

void WorkerGroup::begin_stopping(int signo) {
  count_ended_workers();
  attempt_->enter(AttemptPhase::kStopping, std::chrono::steady_clock::now());
  stopping_began();
  // (A standby's start goes on: no worker's is under way beside it.)
  if (warm_ != nullptr && !standby_starting_) warm_->stop_forking();
  for (RunningWorker& w : attempt_->workers) {
    if (!w.running()) continue;
    w.stopped_by_us = true;
    w.process->signal_group(signo);
  }
  kill_after_shutdown_timeout();
}

void WorkerGroup::kill_after_shutdown_timeout() {
  kill_armed_ = true;
  kill_timer_.expires_after(shutdown_timeout_);
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    kill_armed_ = false;
    kill_survivors();
  });
}

void WorkerGroup::kill_survivors() {
  attempt_->enter(AttemptPhase::kKilling, std::chrono::steady_clock::now());
  for (RunningWorker& w : attempt_->workers) {
    if (!w.running() || w.parking) continue;
    spdlog::warn("worker pid {} did not exit within the shutdown timeout: sending SIGKILL",
                 w.process->pid());
    w.process->signal_group(SIGKILL);
  }
  kill_timer_.expires_after(kKillGrace);
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) abandon_survivors();
  });
}

void WorkerGroup::abandon_survivors() {
  for (RunningWorker& rw : attempt_->workers) {
    if (!rw.running() || rw.parking) continue;
    WorkerProcess& w = *rw.process;
    const char state = read_proc_state(w.pid()).value_or('?');
    spdlog::error(
        "worker pid {} survived SIGKILL for {} s (state {}, kernel wait channel {}): ddprun "
        "stops waiting for it and leaves it to the kernel",
        w.pid(), std::chrono::duration_cast<std::chrono::seconds>(kKillGrace).count(), state,
        read_wchan(w.pid()));
    w.abandon();
    --attempt_->running;
  }
  wake();
}

void WorkerGroup::watch_states() {
  state_timer_.expires_after(kStatePoll);
  state_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || !active_) return;
    poll_watchers();
    if (attempt_->unhealthy.empty() && !attempt_->hang_declared()) watch_states();
  });
}

void WorkerGroup::poll_watchers() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& watcher : watchers_) {
    switch (watcher->poll(*attempt_, now, event_log_)) {
      case AttemptWatcher::Finding::kNothing:
        break;
      case AttemptWatcher::Finding::kStop:
        if (!attempt_->stopping()) begin_stopping(SIGTERM);
        return;
      case AttemptWatcher::Finding::kHang:
        // In process, the ranks that wait for the hung ones abort; those that do not are hung.
        if (all_can_restart_in_process(true)) {
          begin_parking(kHangAbortGrace);
        } else {
          stacks_.on_hang(*attempt_);
        }
        return;
    }
  }
}

void WorkerGroup::worker_progress(const RunningWorker& worker, WorkerProgress kind) {
  const auto now = std::chrono::steady_clock::now();
  attempt_->progress(now);
  for (auto& watcher : watchers_) watcher->progress(worker, kind, now);
}

void WorkerGroup::stop_workers(uint64_t number) {
  if (!active_ || attempt_->number != number) return;
  end_attempt();
}

void WorkerGroup::interrupt_for_stacks() {
  if (!active_ || attempt_->stopping() || !stacks_.captures()) {
    interrupt();
    return;
  }
  attempt_->stacks_wanted = true;
  if (all_can_restart_in_process(true)) {  // each rank writes its stacks, then aborts
    interrupt();
    return;
  }
  attempt_->cause(StopReason::kInterrupted);
  stacks_.on_peer_hang(*attempt_);
}

void WorkerGroup::interrupt() {
  if (!active_) {
    interrupt_pending_ = true;
    return;
  }
  if (attempt_->stopping()) return;
  attempt_->cause(StopReason::kInterrupted);
  end_attempt();
}

void WorkerGroup::stop(int signo) {
  if (!active_) {
    stop_pending_ = signo;
    return;
  }
  Attempt& a = *attempt_;
  if (a.stop_signal != 0) {
    kill_survivors();  // asked twice: do not wait for the grace period
    return;
  }
  a.stop_signal = signo;
  a.cause(StopReason::kSignal);
  if (!a.stopping()) {
    begin_stopping(signo);
    return;
  }
  // Already stopping after a failure: pass the user's signal on as well (and stop those that were
  // aborting their attempt to run again), within the shutdown timeout like any stop (those parking
  // had no kill armed).
  for (RunningWorker& w : a.workers) {
    w.parking = false;
    if (!w.running()) continue;
    w.stopped_by_us = true;
    w.process->signal_group(signo);
  }
  // (Not where SIGKILL was sent already: its grace before the survivors are given up runs on.)
  if (!kill_armed_ && a.phase < AttemptPhase::kKilling) kill_after_shutdown_timeout();
}

}  // namespace ddprun::agent
