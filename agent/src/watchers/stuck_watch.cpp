#include "watchers/stuck_watch.hpp"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "logs/event_log.hpp"
#include "watchers/proc_state.hpp"

namespace ddprun::agent {

AttemptWatcher::Finding StuckWatch::poll(Attempt& a, std::chrono::steady_clock::time_point now,
                                         EventLog* log) {
  if (std::exchange(attempt_, a.number) != a.number) d_since_.clear();
  for (RunningWorker& rw : a.workers) {
    if (!rw.running() || read_proc_state(rw.process->pid()) != 'D') {
      d_since_.erase(rw.launch.id.local_rank);
      continue;
    }
    const auto stuck = now - d_since_.try_emplace(rw.launch.id.local_rank, now).first->second;
    if (stuck < timeout_) continue;
    const int pid = rw.process->pid();
    const WorkerIdentity& id = rw.launch.id;
    const std::string wchan = read_wchan(pid);
    a.unhealthy = fmt::format(
        "worker local_rank {} (rank {}, pid {}) has been in uninterruptible sleep (state D, "
        "kernel wait channel {}) for {:.1f} s, at least TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT "
        "({:g} s): this node takes no further part in the job",
        id.local_rank, id.rank, pid, wchan, std::chrono::duration<double>(stuck).count(),
        std::chrono::duration<double>(timeout_).count());
    a.cause(StopReason::kUnhealthy);
    spdlog::error("{}", a.unhealthy);
    if (log != nullptr) {
      log->record("worker_uninterruptible",
                  {{"local_rank", id.local_rank},
                   {"rank", id.rank},
                   {"pid", pid},
                   {"wchan", wchan},
                   {"seconds", std::chrono::duration<double>(stuck).count()}});
    }
    return Finding::kStop;
  }
  return Finding::kNothing;
}

}  // namespace ddprun::agent
