#include "worker_group.hpp"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "bounded_command.hpp"
#include "ddprun/agent/signals.hpp"
#include "event_log.hpp"
#include "log_pump.hpp"
#include "proc_state.hpp"
#include "warm_interpreter.hpp"
#include "worker_stacks.hpp"

namespace ddprun::agent {
namespace {
// How long teed output may keep arriving after every worker has exited (a stray process that left
// the worker's process group may hold the pipe).
constexpr auto kPumpDrain = std::chrono::seconds(2);
// After SIGKILL, how long a worker may take to die before ddprun stops waiting for it (a process in
// uninterruptible sleep dies only when the kernel lets it).
constexpr auto kKillGrace = std::chrono::seconds(5);
// After SIGABRT on a hang, how long Python workers have to write their stacks and die.
constexpr auto kStackDumpLimit = std::chrono::seconds(2);
// How long the other nodes may take to hear of a hang, and then to freeze their workers, before
// this node's workers dump their stacks anyway.
constexpr auto kAnnounceLimit = std::chrono::seconds(1);
constexpr auto kFreezeLimit = std::chrono::seconds(3);
// How long gdb may take to attach to a hung native worker and print its threads' backtraces.
constexpr auto kNativeStackLimit = std::chrono::seconds(20);
// How much of a worker's stderr is kept for its stack dump.
constexpr size_t kStackTail = 256 * 1024;
// How long a round's first workers wait for the warm interpreter's imports (--preload); cold
// starts after that.
constexpr std::chrono::seconds kWarmReadyLimit{60};
// How often workers' states, heartbeats and silences are looked at, when they are watched.
constexpr auto kStatePoll = std::chrono::milliseconds(100);
}  // namespace

WorkerGroup::WorkerGroup(boost::asio::io_context& io, std::chrono::milliseconds shutdown_timeout,
                         Containment& containment)
    : io_(io),
      shutdown_timeout_(shutdown_timeout),
      containment_(containment),
      wake_(io),
      kill_timer_(io),
      state_timer_(io) {}

WorkerGroup::~WorkerGroup() {
  for (auto& p : pumps_) p->finish();
}

void WorkerGroup::wake() {
  woken_ = true;
  wake_.cancel();
}

void WorkerGroup::add_watch_variables(Environment& env) const {
  if (hang_policy_.mode != HangPolicy::Mode::kOff && python_stacks_) {
    env.try_emplace("PYTHONFAULTHANDLER", "1");
  }
}

void WorkerGroup::start_workers_from(WarmInterpreter* warm, Environment sample) {
  warm_ = warm;
  if (warm_ == nullptr) return;
  add_watch_variables(sample);
  warm_->prepare(shared_part(sample));
}

boost::asio::awaitable<GroupResult> WorkerGroup::run(std::vector<WorkerLaunch> launches) {
  launches_ = std::move(launches);
  workers_.clear();
  pumps_.clear();
  failures_.clear();
  stopped_by_us_.assign(launches_.size(), false);
  ended_because_.assign(launches_.size(), {});
  d_since_.assign(launches_.size(), std::nullopt);
  unhealthy_.clear();
  hang_declared_ = stacks_wanted_ = false;
  ++attempt_;
  clocks_.clear();
  heartbeats_.clear();
  heard_beat_.assign(launches_.size(), false);
  err_pumps_.assign(launches_.size(), nullptr);
  if (hang_policy_.mode != HangPolicy::Mode::kOff) {
    for (size_t i = 0; i < launches_.size(); ++i) {
      clocks_.emplace_back(hang_policy_, std::chrono::steady_clock::now());
      heartbeats_.push_back(std::make_unique<HeartbeatFile>(
          heartbeat_dir_ + "/heartbeat." + std::to_string(launches_[i].id.local_rank)));
      launches_[i].spawn.env["DDPRUN_HEARTBEAT_FILE"] = heartbeats_.back()->path();
      launches_[i].spawn.debuggable = !python_stacks_ && !gdb_.empty();
    }
  }
  for (WorkerLaunch& l : launches_) add_watch_variables(l.spawn.env);
  if (warm_ != nullptr && !launches_.empty()) {
    warm_->prepare(shared_part(launches_.front().spawn.env));
    co_await warm_->ready(kWarmReadyLimit);
  }
  running_ = open_pumps_ = 0;
  stopping_ = sigkill_sent_ = false;
  stop_signal_ = 0;
  interrupted_ = false;
  if (std::exchange(interrupt_pending_, false)) {
    GroupResult result;
    result.state = GroupResult::State::kInterrupted;
    co_return result;
  }
  active_ = true;

  for (size_t i = 0; i < launches_.size(); ++i) {
    const WorkerLaunch& l = launches_[i];
    try {
      workers_.push_back(
          std::make_unique<WorkerProcess>(io_, l.spawn, containment_.worker_cgroup(), warm_));
    } catch (const std::system_error& e) {
      // The machine refused a process: stop what started and report it like a failed worker.
      spdlog::error("cannot start local rank {}: {}", l.id.local_rank, e.what());
      WorkerFailure f;
      f.local_rank = l.id.local_rank;
      f.rank = l.id.rank;
      f.exitcode = 127;
      f.time = std::chrono::system_clock::now();
      f.error = ErrorRecord{e.what(), {}, {}, {}};
      failures_.push_back(std::move(f));
      begin_stopping(SIGTERM);
      break;
    }
    ++running_;
    WorkerProcess& w = *workers_.back();
    containment_.started(w.pid(), w.cgroup_path());
    for (auto [fd, target] : {std::pair{w.take_stdout_pipe(), &l.tee_out},
                              std::pair{w.take_stderr_pipe(), &l.tee_err}}) {
      if (fd < 0) continue;
      auto pump =
          std::make_shared<LogPump>(io_, fd, target->file, target->console_fd,
                                    target->raw ? std::string() : l.prefix, target->duplicate);
      if (!clocks_.empty()) {
        pump->set_on_output([this, i] {
          // A worker's output is progress until it sends heartbeats (then those alone are).
          if (i < clocks_.size() && !heard_beat_[i]) {
            clocks_[i].progress(std::chrono::steady_clock::now());
          }
        });
      }
      if (target == &l.tee_err && python_stacks_ && !clocks_.empty()) {
        pump->keep_tail(kStackTail);
        err_pumps_[i] = pump;
      }
      ++open_pumps_;
      pump->start([this] {
        --open_pumps_;
        wake();
      });
      pumps_.push_back(std::move(pump));
    }
    w.watch_exit([this, i](const ExitStatus& s) { on_exit(i, s); });
  }
  if (event_log_ != nullptr) {
    nlohmann::json started = nlohmann::json::array();
    for (size_t i = 0; i < workers_.size(); ++i) {
      started.push_back({{"local_rank", launches_[i].id.local_rank},
                         {"rank", launches_[i].id.rank},
                         {"pid", workers_[i]->pid()}});
    }
    event_log_->record("workers_started", {{"workers", std::move(started)}});
  }

  if (monitored()) watch_states();
  boost::asio::steady_timer drain(io_);
  bool draining = false;
  while (running_ > 0 || open_pumps_ > 0) {
    if (running_ == 0 && !draining) {
      draining = true;
      drain.expires_after(kPumpDrain);
      drain.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        for (auto& p : pumps_) p->finish();
      });
    }
    if (!woken_) {
      wake_.expires_at(boost::asio::steady_timer::time_point::max());
      co_await wake_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    woken_ = false;
  }
  drain.cancel();
  kill_timer_.cancel();
  state_timer_.cancel();
  containment_.kill_orphans();  // what the workers left behind, orphaned
  active_ = false;

  co_return conclude();
}

GroupResult WorkerGroup::conclude() {
  GroupResult result;
  result.failures = std::move(failures_);
  result.stop_signal = stop_signal_;
  result.unhealthy = unhealthy_;
  result.hang = hang_declared_;
  for (const auto& w : workers_) result.pids.push_back(w->pid());
  if (stacks_wanted_) collect_stacks(result);
  if (stop_signal_ != 0) {
    result.state = GroupResult::State::kStopped;
  } else if (!unhealthy_.empty()) {
    result.state = GroupResult::State::kUnhealthy;
  } else if (!result.failures.empty()) {
    result.state = GroupResult::State::kFailed;
  } else if (interrupted_) {
    result.state = GroupResult::State::kInterrupted;
  }
  workers_.clear();
  pumps_.clear();
  return result;
}

void WorkerGroup::on_exit(size_t index, const ExitStatus& status) {
  --running_;
  const WorkerLaunch& l = launches_[index];
  const WorkerProcess& w = *workers_[index];
  containment_.ended(w.pid());
  const bool ended_by_us = !ended_because_[index].empty();
  if (event_log_ != nullptr) {
    nlohmann::json exited = {{"local_rank", l.id.local_rank},
                             {"rank", l.id.rank},
                             {"pid", w.pid()},
                             {"stopped_by_ddprun", static_cast<bool>(stopped_by_us_[index])}};
    if (status.code >= 0) {
      exited["exitcode"] = status.code;
    } else {
      exited["signal"] = signal_name(-status.code);
      exited["oom_killed"] = status.oom_killed;
      // A SIGKILL ddprun did not send usually comes from the kernel's OOM killer.
      exited["oom_hint"] =
          status.oom_killed || (-status.code == SIGKILL && !sigkill_sent_ && !ended_by_us);
    }
    event_log_->record("worker_exited", std::move(exited));
  }
  if (ended_by_us || (status.code != 0 && !stopped_by_us_[index])) {
    WorkerFailure f;
    f.local_rank = l.id.local_rank;
    f.rank = l.id.rank;
    f.pid = w.pid();
    f.exitcode = status.code;
    f.time = status.time;
    f.sigkill_sent_by_ddprun = sigkill_sent_ || ended_by_us;
    f.oom_killed = status.oom_killed;
    f.ended_because = ended_because_[index];
    if (!w.exec_error().empty()) {
      f.error = ErrorRecord{w.exec_error(), {}, {}, {}};
    } else if ((f.error = read_error_file(l.error_file))) {
      f.error_file = l.error_file;
    }
    spdlog::warn("worker local_rank {} (rank {}, pid {}) failed: exit code {}", f.local_rank,
                 f.rank, f.pid, f.exitcode);
    failures_.push_back(std::move(f));
    if (!stopping_) begin_stopping(SIGTERM);
  }
  wake();
}

std::optional<size_t> WorkerGroup::running_worker(int pid) const {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i]->running() && workers_[i]->pid() == pid) return i;
  }
  return std::nullopt;
}

bool WorkerGroup::runs(int pid) const { return running_worker(pid).has_value(); }

void WorkerGroup::expire_timer(const ExpiredTimer& timer) {
  if (const std::optional<size_t> found = running_worker(timer.pid)) {
    const size_t i = *found;
    ended_because_[i] = fmt::format(
        "torch expiration timer '{}' ran out: the worker was still inside it {:.3f} s past its "
        "deadline, and ddprun sent it {}",
        timer.scope, timer.overstay.count() / 1000.0, signal_name(timer.signal));
    if (event_log_ != nullptr) {
      event_log_->record("timer_expired", {{"local_rank", launches_[i].id.local_rank},
                                           {"rank", launches_[i].id.rank},
                                           {"pid", timer.pid},
                                           {"scope", timer.scope},
                                           {"overstay_s", timer.overstay.count() / 1000.0},
                                           {"signal", signal_name(timer.signal)}});
    }
    ::kill(timer.pid, timer.signal);
  }
}

void WorkerGroup::begin_stopping(int signo) {
  stopping_ = true;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!workers_[i]->running()) continue;
    stopped_by_us_[i] = true;
    workers_[i]->signal_group(signo);
  }
  kill_timer_.expires_after(shutdown_timeout_);
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) kill_survivors();
  });
}

void WorkerGroup::kill_survivors() {
  sigkill_sent_ = true;
  for (auto& w : workers_) {
    if (!w->running()) continue;
    spdlog::warn("worker pid {} did not exit within the shutdown timeout: sending SIGKILL",
                 w->pid());
    w->signal_group(SIGKILL);
  }
  kill_timer_.expires_after(kKillGrace);
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) abandon_survivors();
  });
}

void WorkerGroup::abandon_survivors() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    WorkerProcess& w = *workers_[i];
    if (!w.running()) continue;
    const char state = read_proc_state(w.pid()).value_or('?');
    spdlog::error(
        "worker pid {} survived SIGKILL for {} s (state {}, kernel wait channel {}): ddprun "
        "stops waiting for it and leaves it to the kernel",
        w.pid(), std::chrono::duration_cast<std::chrono::seconds>(kKillGrace).count(), state,
        read_wchan(w.pid()));
    w.abandon();
    --running_;
  }
  wake();
}

void WorkerGroup::watch_states() {
  state_timer_.expires_after(kStatePoll);
  state_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || !active_) return;
    check_states();
    check_hangs();
    if (unhealthy_.empty() && !hang_declared_) watch_states();
  });
}

bool WorkerGroup::monitored() const {
  return d_timeout_.count() > 0 || hang_policy_.mode != HangPolicy::Mode::kOff;
}

void WorkerGroup::progress_of(int pid) {
  const std::optional<size_t> i = running_worker(pid);
  if (i && *i < clocks_.size()) clocks_[*i].progress(std::chrono::steady_clock::now());
}

void WorkerGroup::check_hangs() {
  if (clocks_.empty() || stopping_ || hang_declared_) return;
  const auto now = std::chrono::steady_clock::now();
  std::vector<size_t> hung;
  for (size_t i = 0; i < workers_.size() && i < clocks_.size(); ++i) {
    if (!workers_[i]->running()) continue;
    if (heartbeats_[i]->beat()) {
      heard_beat_[i] = true;
      clocks_[i].progress(now);
    }
    if (const auto waited = read_cpu_wait(workers_[i]->pid())) clocks_[i].cpu_wait(*waited);
    if (clocks_[i].hung(now)) hung.push_back(i);
  }
  if (hung.empty()) return;
  hang_declared_ = true;
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t i : hung) {
    const double silent = clocks_[i].silent(now).count() / 1000.0;
    const double timeout = clocks_[i].timeout().count() / 1000.0;
    const double waited = clocks_[i].waited_for_cpu().count() / 1000.0;
    ended_because_[i] = fmt::format(
        "hung: no progress for {:.1f} s{} (--hang_timeout {}{:.1f} s; progress is a heartbeat, a "
        "torch timer{})",
        silent,
        waited >= 0.1 ? fmt::format(", not counting {:.1f} s waiting for a CPU", waited) : "",
        hang_policy_.mode == HangPolicy::Mode::kAuto ? "auto, learned " : "", timeout,
        heard_beat_[i] ? "" : " or a line of output");
    const WorkerIdentity& id = launches_[i].id;
    spdlog::error("worker local_rank {} (rank {}, pid {}) is hung: no progress for {:.1f} s",
                  id.local_rank, id.rank, workers_[i]->pid(), silent);
    ranks.push_back({{"local_rank", id.local_rank},
                     {"rank", id.rank},
                     {"pid", workers_[i]->pid()},
                     {"silent_s", silent},
                     {"waited_for_cpu_s", waited},
                     {"timeout_s", timeout}});
  }
  if (event_log_ != nullptr) event_log_->record("hang", {{"workers", std::move(ranks)}});
  stacks_wanted_ = captures_stacks();
  if (!hang_coordinator_.announce) {
    dump_stacks_then_stop();
    return;
  }
  if (python_stacks_) freeze();
  // The other nodes are told first, so that their ranks are frozen where the hang holds them too.
  hang_coordinator_.announce(once_in_attempt([this] { freeze_then_dump(); }, kAnnounceLimit));
}

std::function<void()> WorkerGroup::once_in_attempt(std::function<void()> step,
                                                   std::chrono::milliseconds limit) {
  auto done = std::make_shared<bool>(false);
  auto go = [this, done, step = std::move(step), attempt = attempt_] {
    if (std::exchange(*done, true) || attempt != attempt_ || !active_) return;
    step();
  };
  kill_timer_.expires_after(limit);
  kill_timer_.async_wait([go](boost::system::error_code ec) {
    if (!ec) go();
  });
  return go;
}

void WorkerGroup::freeze() {
  for (const auto& w : workers_) {
    if (w->running()) ::kill(w->pid(), SIGSTOP);
  }
}

void WorkerGroup::freeze_then_dump() {
  if (!python_stacks_ || !hang_coordinator_.frozen) {
    dump_stacks_then_stop();
    return;
  }
  stopping_ = true;
  freeze();
  hang_coordinator_.frozen(once_in_attempt([this] { dump_stacks_then_stop(); }, kFreezeLimit));
}

void WorkerGroup::interrupt_for_stacks() {
  if (!active_ || stopping_ || !captures_stacks()) {
    interrupt();
    return;
  }
  interrupted_ = true;
  stacks_wanted_ = true;
  freeze_then_dump();
}

void WorkerGroup::dump_stacks_then_stop() {
  if (!stacks_wanted_) {
    begin_stopping(SIGTERM);
    return;
  }
  stopping_ = true;
  if (!python_stacks_) {
    boost::asio::co_spawn(io_, read_native_stacks(attempt_), boost::asio::detached);
    return;
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!workers_[i]->running()) continue;
    stopped_by_us_[i] = true;
    ::kill(workers_[i]->pid(), SIGABRT);
    ::kill(workers_[i]->pid(), SIGCONT);  // frozen: the pending SIGABRT comes first
  }
  kill_timer_.expires_after(kStackDumpLimit);
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) begin_stopping(SIGTERM);
  });
}

boost::asio::awaitable<void> WorkerGroup::read_native_stacks(uint64_t attempt) {
  namespace asio = boost::asio;
  native_dumps_.assign(workers_.size(), "");
  // One gdb per worker, all at once, each bounded; the stop comes once every one has ended.
  struct Pending {
    explicit Pending(asio::io_context& io) : done(io) {}
    size_t left = 0;
    asio::steady_timer done;
  };
  auto pending = std::make_shared<Pending>(io_);
  pending->done.expires_at(asio::steady_timer::time_point::max());
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!workers_[i]->running()) continue;
    ++pending->left;
    const int pid = workers_[i]->pid();
    const std::string file = fmt::format("{}/stacks.{}", heartbeat_dir_, i);
    const std::string command = fmt::format(
        "exec '{}' -p {} -batch -nx -q -ex 'set pagination off' -ex 'thread apply all bt'", gdb_,
        pid);
    asio::co_spawn(
        io_,
        [this, i, file, command, pending, env = launches_[i].spawn.env,
         attempt]() -> asio::awaitable<void> {
          co_await run_bounded_command(io_, containment_, command, kNativeStackLimit, env, file);
          if (attempt == attempt_ && i < native_dumps_.size()) {
            std::ifstream in(file);
            native_dumps_[i].assign(std::istreambuf_iterator<char>(in), {});
          }
          std::error_code gone;
          std::filesystem::remove(file, gone);
          if (--pending->left == 0) pending->done.cancel();
        },
        asio::detached);
  }
  if (pending->left > 0) {
    co_await pending->done.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  if (attempt == attempt_ && active_) begin_stopping(SIGTERM);
}

std::optional<WorkerStack> WorkerGroup::stack_of(size_t i) const {
  if (python_stacks_) {
    return err_pumps_[i] ? last_python_stack(err_pumps_[i]->tail()) : std::nullopt;
  }
  if (i >= native_dumps_.size() || i >= workers_.size()) return std::nullopt;
  return gdb_stack(native_dumps_[i], workers_[i]->pid());
}

void WorkerGroup::collect_stacks(GroupResult& result) {
  for (size_t i = 0; i < launches_.size() && i < err_pumps_.size(); ++i) {
    const int rank = launches_[i].id.rank;
    const std::optional<WorkerStack> stack = stack_of(i);
    result.frames[rank] = stack ? stack->innermost : "no stack (the worker wrote none)";
    result.stacks +=
        fmt::format("=== rank {} (local_rank {}) ===\n{}\n", rank, launches_[i].id.local_rank,
                    stack ? stack->text : result.frames[rank]);
  }
}

void WorkerGroup::check_states() {
  if (d_timeout_.count() == 0) return;
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < workers_.size(); ++i) {
    const WorkerProcess& w = *workers_[i];
    if (!w.running() || read_proc_state(w.pid()) != 'D') {
      d_since_[i].reset();
      continue;
    }
    if (!d_since_[i]) d_since_[i] = now;
    const auto stuck = now - *d_since_[i];
    if (stuck < d_timeout_) continue;
    const WorkerIdentity& id = launches_[i].id;
    const std::string wchan = read_wchan(w.pid());
    unhealthy_ = fmt::format(
        "worker local_rank {} (rank {}, pid {}) has been in uninterruptible sleep (state D, "
        "kernel wait channel {}) for {:.1f} s, at least TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT "
        "({:g} s): this node takes no further part in the job",
        id.local_rank, id.rank, w.pid(), wchan, std::chrono::duration<double>(stuck).count(),
        std::chrono::duration<double>(d_timeout_).count());
    spdlog::error("{}", unhealthy_);
    if (event_log_ != nullptr) {
      event_log_->record("worker_uninterruptible",
                         {{"local_rank", id.local_rank},
                          {"rank", id.rank},
                          {"pid", w.pid()},
                          {"wchan", wchan},
                          {"seconds", std::chrono::duration<double>(stuck).count()}});
    }
    if (!stopping_) begin_stopping(SIGTERM);
    return;
  }
}

void WorkerGroup::interrupt() {
  if (!active_) {
    interrupt_pending_ = true;
    return;
  }
  if (stopping_) return;
  interrupted_ = true;
  begin_stopping(SIGTERM);
}

void WorkerGroup::stop(int signo) {
  if (!active_) return;
  if (stop_signal_ != 0) {
    kill_survivors();  // asked twice: do not wait for the grace period
    return;
  }
  stop_signal_ = signo;
  if (!stopping_) {
    begin_stopping(signo);
    return;
  }
  // Already stopping after a failure: pass the user's signal on as well.
  for (auto& w : workers_) w->signal_group(signo);
}

}  // namespace ddprun::agent
