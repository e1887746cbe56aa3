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
  for (RunningWorker& w : a.workers) {
    const auto learned = learned_.find(w.launch.id.local_rank);
    w.clock.emplace(
        policy_, std::chrono::steady_clock::now(),
        learned == learned_.end() ? std::chrono::steady_clock::duration{} : learned->second);
    w.heartbeat = std::make_unique<HeartbeatFile>(dir_ + "/heartbeat." +
                                                  std::to_string(w.launch.id.local_rank));
    w.launch.spawn.env["DDPRUN_HEARTBEAT_FILE"] = w.heartbeat->path();
  }
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
  if (a.stopping() || a.hang_declared) return Finding::kNothing;
  const auto node_waited = node_cpu_wait(a);
  std::vector<RunningWorker*> hung;
  for (RunningWorker& w : a.workers) {
    if (!w.running() || !w.clock) continue;
    if (w.heartbeat->beat()) {
      w.heard_beat = true;
      w.clock->progress(now);
      a.progress(now);
    }
    w.clock->cpu_wait(node_waited);
    // Learned while nothing stopped the attempt: no interval ends in a stop's dump.
    auto& learned = learned_[w.launch.id.local_rank];
    learned = std::max(learned, w.clock->slowest());
    if (w.clock->hung(now)) hung.push_back(&w);
  }
  if (hung.empty()) return Finding::kNothing;
  a.hang_declared = true;
  nlohmann::json ranks = nlohmann::json::array();
  for (RunningWorker* w : hung) {
    const ProgressClock& clock = *w->clock;
    // The hang began when the most silent of them last made progress.
    const auto silent_since = now - clock.silent(now);
    if (!a.times.failed || silent_since < *a.times.failed) a.times.failed = silent_since;
    const double silent = clock.silent(now).count() / 1000.0;
    const double timeout = clock.timeout().count() / 1000.0;
    const double waited = clock.waited_for_cpu().count() / 1000.0;
    w->ended_because = fmt::format(
        "hung: no progress for {:.1f} s{} (--hang_timeout {}{:.1f} s; progress is a heartbeat, a "
        "torch timer{})",
        silent,
        waited >= 0.1
            ? fmt::format(", not counting {:.1f} s the node's workers waited for a CPU", waited)
            : "",
        policy_.mode == HangPolicy::Mode::kAuto ? "auto, learned " : "", timeout,
        w->heard_beat ? "" : " or a line of output");
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
