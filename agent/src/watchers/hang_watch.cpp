#include "watchers/hang_watch.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "logs/event_log.hpp"
#include "watchers/proc_state.hpp"

namespace ddprun::agent {

void HangWatch::prepare(Attempt& a) {
  cpu_wait_read_.clear();
  workers_.clear();  // the last attempt's heartbeat files go before this one's, of the same names
  for (RunningWorker& w : a.workers) {
    const int local_rank = w.launch.id.local_rank;
    const auto learned = learned_.find(local_rank);
    ProgressClock clock(
        policy_, std::chrono::steady_clock::now(),
        learned == learned_.end() ? std::chrono::steady_clock::duration{} : learned->second);
    auto heartbeat =
        std::make_unique<HeartbeatFile>(dir_ + "/heartbeat." + std::to_string(local_rank));
    const Watched& watched =
        workers_.try_emplace(local_rank, Watched{clock, std::move(heartbeat)}).first->second;
    w.launch.spawn.env["DDPRUN_HEARTBEAT_FILE"] = watched.heartbeat->path();
  }
}

void HangWatch::progress(const RunningWorker& w, WorkerProgress kind,
                         std::chrono::steady_clock::time_point now) {
  const auto watched = workers_.find(w.launch.id.local_rank);
  if (watched == workers_.end()) return;
  if (kind == WorkerProgress::kOutput && watched->second.heard_beat) return;
  watched->second.clock.progress(now);
}

std::chrono::nanoseconds HangWatch::node_cpu_wait(Attempt& a) {
  std::chrono::nanoseconds added{0};
  for (RunningWorker& w : a.workers) {
    if (!w.running()) continue;
    const auto waited = read_cpu_wait(w.process->pid());
    if (!waited) continue;
    const auto [read, first] = cpu_wait_read_.try_emplace(w.process->pid(), *waited);
    if (!first) added = std::max(added, *waited - std::exchange(read->second, *waited));
  }
  node_cpu_wait_ += added;
  return node_cpu_wait_;
}

AttemptWatcher::Finding HangWatch::poll(Attempt& a, std::chrono::steady_clock::time_point now,
                                        EventLog* log) {
  if (a.stopping() || a.reason != StopReason::kNone) return Finding::kNothing;
  const auto node_waited = node_cpu_wait(a);
  std::vector<std::pair<RunningWorker*, const Watched*>> hung;
  for (RunningWorker& w : a.workers) {
    const auto found = workers_.find(w.launch.id.local_rank);
    if (!w.running() || found == workers_.end()) continue;
    Watched& watched = found->second;
    const bool beat = watched.heartbeat->beat();
    if (watched.heartbeat->ended()) watched.clock.ending(now);
    if (beat) {
      watched.heard_beat = true;
      watched.clock.progress(now);
      a.progress(now);
    }
    watched.clock.cpu_wait(node_waited);
    // Learned while nothing stopped the attempt: no interval ends in a stop's dump.
    auto& learned = learned_[w.launch.id.local_rank];
    learned = std::max(learned, watched.clock.slowest());
    if (watched.clock.hung(now)) hung.emplace_back(&w, &watched);
  }
  if (hung.empty()) return Finding::kNothing;
  a.cause(StopReason::kHang);
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& [w, watched] : hung) {
    const ProgressClock& clock = watched->clock;
    // The hang began when the most silent of them last made progress.
    const auto silent_since = now - clock.silent(now);
    if (!a.times.failed || silent_since < *a.times.failed) a.times.failed = silent_since;
    const double silent = clock.silent(now).count() / 1000.0;
    const double timeout = clock.timeout().count() / 1000.0;
    const double waited = clock.waited_for_cpu().count() / 1000.0;
    w->ended_because = fmt::format(
        "hung: no progress for {:.1f} s{}{} ({}{:.1f} s; progress is a heartbeat, a torch "
        "timer{})",
        silent, clock.is_ending() ? " after its program ended, in its interpreter's exit" : "",
        waited >= 0.1
            ? fmt::format(", not counting {:.1f} s the node's workers waited for a CPU", waited)
            : "",
        clock.is_ending()                         ? "an exit may take "
        : policy_.mode == HangPolicy::Mode::kAuto ? "--hang_timeout auto, learned "
                                                  : "--hang_timeout ",
        timeout, watched->heard_beat ? "" : " or a line of output");
    const WorkerIdentity& id = w->launch.id;
    const int pid = w->process->pid();
    spdlog::error("worker local_rank {} (rank {}, pid {}) is hung: no progress for {:.1f} s",
                  id.local_rank, id.rank, pid, silent);
    ranks.push_back({{"local_rank", id.local_rank},
                     {"rank", id.rank},
                     {"pid", pid},
                     {"silent_s", silent},
                     {"waited_for_cpu_s", waited},
                     {"timeout_s", timeout}});
  }
  if (log != nullptr) log->record("hang", {{"workers", std::move(ranks)}});
  return Finding::kHang;
}

}  // namespace ddprun::agent
