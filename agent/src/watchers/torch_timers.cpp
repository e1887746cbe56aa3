#include "watchers/torch_timers.hpp"

#include <csignal>
#include <utility>

#include <fmt/format.h>

#include "ddprun/agent/signals.hpp"
#include "logs/event_log.hpp"

namespace ddprun::agent {

TorchTimers::TorchTimers(boost::asio::io_context& io, std::string path, AttemptControl& group,
                         EventLog* log)
    : group_(group),
      log_(log),
      server_(
          io, std::move(path), [this](int pid) { return running(pid) != nullptr; },
          [this](const ExpiredTimer& t) { expire(t); }, [this](int pid) { progress(pid); }) {}

RunningWorker* TorchTimers::running(int pid) {
  Attempt* attempt = group_.running_attempt();
  if (attempt == nullptr) return nullptr;
  for (RunningWorker& w : attempt->workers) {
    if (w.running() && w.process->pid() == pid) return &w;
  }
  return nullptr;
}

void TorchTimers::progress(int pid) {
  if (const RunningWorker* w = running(pid))
    group_.worker_progress(*w, WorkerProgress::kTorchTimer);
}

void TorchTimers::expire(const ExpiredTimer& timer) {
  RunningWorker* w = running(timer.pid);
  if (w == nullptr) return;
  w->ended_because = fmt::format(
      "torch expiration timer '{}' ran out: the worker was still inside it {:.3f} s past its "
      "deadline, and ddprun sent it {}",
      timer.scope, timer.overstay.count() / 1000.0, signal_name(timer.signal));
  if (log_ != nullptr) {
    log_->record("timer_expired", {{"local_rank", w->launch.id.local_rank},
                                   {"rank", w->launch.id.rank},
                                   {"pid", timer.pid},
                                   {"scope", timer.scope},
                                   {"overstay_s", timer.overstay.count() / 1000.0},
                                   {"signal", signal_name(timer.signal)}});
  }
  ::kill(timer.pid, timer.signal);
}

}  // namespace ddprun::agent
