#include <algorithm>
#include <csignal>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/agent/signals.hpp"
#include "logs/event_log.hpp"
#include "logs/log_pump.hpp"
#include "logs/python_traceback.hpp"
#include "workers/warm_interpreter.hpp"
#include "workers/worker_group.hpp"

// --restart_mode=in_process: the worker group's part in an in-process restart (worker_group.hpp,
// restart_in_process): the workers asked to abort their attempt, kept, and given to the next.
namespace ddprun::agent {
namespace {
// How often the workers' channels are looked at (a raised training, an aborted attempt).
constexpr auto kInProcessPoll = std::chrono::milliseconds(10);

}  // namespace

bool WorkerGroup::adopt_kept(size_t i) {
  Attempt& a = *attempt_;
  RunningWorker& rw = a.workers[i];
  const auto kept = std::find_if(kept_.begin(), kept_.end(), [&](const RunningWorker& w) {
    return w.launch.id.local_rank == rw.launch.id.local_rank;
  });
  if (kept == kept_.end()) return false;
  RunningWorker old = std::move(*kept);
  kept_.erase(kept);
  if (!old.running()) return false;  // it ended while kept
  if (!told_to_resume(old, rw.launch.spawn.env)) return false;
  rw.take_process_of(old);
  ++a.running;
  spdlog::info("local rank {} (rank {}, pid {}) runs again in its own process",
               rw.launch.id.local_rank, rw.launch.id.rank, rw.process->pid());
  return true;
}

bool WorkerGroup::told_to_resume(RunningWorker& w, Environment& env) {
  env["DDPRUN_INPROCESS_FILE"] = w.channel->path();
  try {
    w.channel->resume(attempt_->number, env, w.launch.spawn.env);
    return true;
  } catch (const std::exception& e) {  // a value that is not UTF-8, /dev/shm full
    spdlog::warn(
        "pid {} cannot be told the next attempt's environment ({}): a new process takes "
        "its place",
        w.process->pid(), e.what());
    w.process->signal_group(SIGKILL);
    containment_.ended(w.process->pid());
    for (auto& p : w.pumps) p->finish();
    return false;  // (its process reaped as it goes)
  }
}

bool WorkerGroup::all_can_restart_in_process(bool hung_too) {
  if (inprocess_dir_.empty()) return false;
  for (const RunningWorker& w : attempt_->workers) {
    if (!w.running() || (!hung_too && !w.ended_because.empty()) || w.channel->ready()) continue;
    // (Not while the attempt starts: its workers have had no time to reach the API.)
    if (attempt_->phase != AttemptPhase::kStarting && !std::exchange(said_not_in_process_, true)) {
      spdlog::warn(
          "--restart_mode=in_process: local rank {} does not run its training under "
          "ddprun.inprocess: the workers restart as processes",
          w.launch.id.local_rank);
    }
    return false;
  }
  return true;
}

void WorkerGroup::begin_parking(std::chrono::milliseconds limit) {
  Attempt& a = *attempt_;
  const auto now = std::chrono::steady_clock::now();
  const bool hang = a.hang_declared();
  // After a hang (this node's or another's), where each rank waited goes into the hang's report:
  // each writes its stacks before it aborts.
  if (hang && stacks_.captures()) a.stacks_wanted = true;
  a.enter(AttemptPhase::kParking, now);
  stopping_began();
  // (A standby's start goes on: no worker's is under way beside it.)
  if (warm_ != nullptr && !standby_starting_) warm_->stop_forking();
  bool to_stop = false;
  for (RunningWorker& w : a.workers) {
    if (!w.running()) continue;
    // Hung (its progress watched), or its torch timer expired: its process goes.
    if (!w.ended_because.empty() && !hang) {
      w.stopped_by_us = true;
      w.process->signal_group(SIGTERM);
      to_stop = true;
      continue;
    }
    try {
      w.channel->abort(a.number, a.stacks_wanted);
      w.parking = true;
    } catch (const std::exception& e) {  // /dev/shm full: its process goes instead
      spdlog::warn("local rank {} (pid {}) cannot be asked to abort in process ({}): it is stopped",
                   w.launch.id.local_rank, w.process->pid(), e.what());
      w.stopped_by_us = true;
      w.process->signal_group(SIGTERM);
      to_stop = true;
    }
  }
  if (to_stop) {
    kill_after_shutdown_timeout();
  }
  parking_deadline_ = now + limit;
  poll_in_process();
}

void WorkerGroup::watch_in_process() {
  inprocess_timer_.expires_after(kInProcessPoll);
  inprocess_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || !active_) return;
    poll_in_process();
    top_up_standbys();
    if (attempt_->running > 0) watch_in_process();
  });
}

void WorkerGroup::poll_in_process() {
  Attempt& a = *attempt_;
  const auto now = std::chrono::steady_clock::now();
  if (!a.stopping()) {  // a training that raised: a failure of its rank, whose process stays
    for (RunningWorker& w : a.workers) {
      if (!w.running()) continue;
      std::optional<std::string> raised = w.channel->raised(a.number);
      if (!raised) continue;
      WorkerFailure f;
      f.local_rank = w.launch.id.local_rank;
      f.rank = w.launch.id.rank;
      f.pid = w.process->pid();
      f.exitcode = 1;
      f.time = std::chrono::system_clock::now();
      if (std::optional<PythonTraceback> tb = last_python_traceback(*raised)) {
        f.error = ErrorRecord{std::move(tb->exception), std::move(tb->traceback), {}, {}};
      } else {
        f.error = ErrorRecord{last_line(*raised), *raised, {}, {}};
      }
      spdlog::warn("worker local_rank {} (rank {}, pid {}) failed: its training raised {}",
                   f.local_rank, f.rank, f.pid, f.error->message);
      if (event_log_ != nullptr) {
        event_log_->record("worker_raised",
                           {{"local_rank", f.local_rank}, {"rank", f.rank}, {"pid", f.pid}});
      }
      a.failures.push_back(std::move(f));
      a.cause(StopReason::kFailure);
    }
    if (!a.failures.empty()) end_attempt();
    if (!a.stopping()) return;
  }
  bool hung = false;
  for (RunningWorker& w : a.workers) {
    if (!w.parking || !w.running()) continue;
    if (w.channel->parked(a.number)) {
      w.parking = false;
      --a.running;
      RunningWorker kept = std::move(w);
      w = RunningWorker(kept.launch);  // the slot keeps no part of it
      w.kept = true;
      w.parked_stack = kept.channel->stack(a.number).value_or(std::string());
      kept_.push_back(std::move(kept));
    } else if (now >= parking_deadline_ && a.hang_declared()) {
      w.parking = false;  // a hung rank: its stack is taken below, then it stops
      hung = true;
    } else if (now >= parking_deadline_) {
      spdlog::warn(
          "local rank {} (pid {}) did not abort its attempt within the shutdown timeout: "
          "stopping its process",
          w.launch.id.local_rank, w.process->pid());
      w.parking = false;
      w.stopped_by_us = true;
      w.process->signal_group(SIGTERM);
      kill_after_shutdown_timeout();
    }
  }
  if (hung) {
    a.enter(AttemptPhase::kCapturingHung, now);
    stacks_.on_hang(a);
  }
  wake();
}

boost::asio::awaitable<void> WorkerGroup::end_kept(int signo) {
  // The way out: a stop that comes meanwhile does not cut it short (they get the stop's signal).
  co_await boost::asio::this_coro::throw_if_cancelled(false);
  if (no_standbys_.empty()) no_standbys_ = "the job ends";  // (their ends are no surprise)
  co_await standby_start_ended();  // a standby that starts now is ended with its start
  for (RunningWorker& s : standbys_) kept_.push_back(std::move(s));
  standbys_.clear();
  co_await end_kept_workers(signo);
}

boost::asio::awaitable<std::vector<int>> WorkerGroup::start_afresh() {
  afresh_ = true;
  std::vector<int> pids;
  std::string ranks;
  for (const RunningWorker& w : kept_) {
    if (!w.running()) continue;
    pids.push_back(w.process->pid());
    ranks += fmt::format("{}local rank {} (pid {})", ranks.empty() ? "" : ", ",
                         w.launch.id.local_rank, w.process->pid());
  }
  if (!pids.empty()) {
    spdlog::warn(
        "--restart_mode=in_process: no checkpoint step to restore, so every rank starts in a new "
        "process: those kept from the last attempt ({}) hold its training state, not what a new "
        "process starts from",
        ranks);
    if (event_log_ != nullptr) {
      event_log_->record("kept_workers_ended",
                         {{"pids", pids}, {"reason", "no checkpoint step to restore"}});
    }
  }
  co_await end_kept_workers(SIGTERM);
  co_return pids;
}

boost::asio::awaitable<void> WorkerGroup::end_kept_workers(int signo) {
  if (kept_.empty()) co_return;
  for (RunningWorker& w : kept_) {
    if (w.running()) w.process->signal_group(signo);
  }
  boost::asio::steady_timer poll(io_);
  const auto sigkill_at = std::chrono::steady_clock::now() + shutdown_timeout_;
  const auto give_up_at = sigkill_at + kKillGrace;
  bool killed = false;
  for (;;) {
    const bool any =
        std::any_of(kept_.begin(), kept_.end(), [](const RunningWorker& w) { return w.running(); });
    const auto now = std::chrono::steady_clock::now();
    if (!any || now >= give_up_at) break;
    if (now >= sigkill_at && !std::exchange(killed, true)) {
      for (RunningWorker& w : kept_) {
        if (w.running()) w.process->signal_group(SIGKILL);
      }
    }
    poll.expires_after(kInProcessPoll);
    co_await poll.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  }
  for (RunningWorker& w : kept_) {
    for (auto& p : w.pumps) p->finish();
  }
  kept_.clear();
}

}  // namespace ddprun::agent
