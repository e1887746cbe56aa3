#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "ddprun/agent/signals.hpp"
#include "logs/event_log.hpp"
#include "logs/log_pump.hpp"
#include "workers/standby_launch.hpp"
#include "workers/worker_group.hpp"

// --standby_workers: the worker group's standby processes (worker_group.hpp, keep_standbys).
namespace ddprun::agent {
namespace {

// Binds every thread of process `pid` to `cpus` (a standby takes a worker's place, and its CPUs);
// a thread that cannot be bound is said in the log.
void bind_threads(pid_t pid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    const pid_t tid = std::stoi(task.path().filename().string());
    if (::sched_setaffinity(tid, sizeof(set), &set) != 0) {
      spdlog::warn("standby pid {}: cannot bind thread {} to its worker's CPUs: {}", pid, tid,
                   std::strerror(errno));
    }
  }
}

}  // namespace

bool WorkerGroup::adopt_standby(size_t i) {
  Attempt& a = *attempt_;
  RunningWorker& rw = a.workers[i];
  const auto ready =
      std::find_if(standbys_.begin(), standbys_.end(), [&rw](const RunningWorker& s) {
        return s.running() && s.channel->ready() && s.launch.spawn.argv == rw.launch.spawn.argv;
      });
  if (ready == standbys_.end()) return false;
  RunningWorker standby = std::move(*ready);
  standbys_.erase(ready);
  rw.take_process_of(standby);
  for (auto& pump : rw.pumps) pump->relabel(rw.launch.prefix);
  if (!rw.launch.spawn.cpus.empty()) bind_threads(rw.process->pid(), rw.launch.spawn.cpus);
  rw.launch.spawn.env["DDPRUN_INPROCESS_FILE"] = rw.channel->path();
  rw.channel->resume(a.number, rw.launch.spawn.env, standby.launch.spawn.env);
  ++a.running;
  spdlog::info("local rank {} (rank {}) runs in standby process {} (its output stays in {})",
               rw.launch.id.local_rank, rw.launch.id.rank, rw.process->pid(),
               standby.launch.tee_out.file.empty()
                   ? std::string("the standby's streams")
                   : std::filesystem::path(standby.launch.tee_out.file).parent_path().string());
  if (event_log_ != nullptr) {
    event_log_->record("standby_adopted", {{"local_rank", rw.launch.id.local_rank},
                                           {"rank", rw.launch.id.rank},
                                           {"pid", rw.process->pid()}});
  }
  return true;
}

void WorkerGroup::top_up_standbys() {
  if (standby_count_ == 0 || standby_starting_ || !no_standbys_.empty() || !active_) return;
  Attempt& a = *attempt_;
  if (a.phase != AttemptPhase::kRunning || !a.times.first_progress ||
      std::chrono::steady_clock::now() < *a.times.first_progress + kStandbyDelay) {
    return;
  }
  const auto running = std::count_if(standbys_.begin(), standbys_.end(),
                                     [](const RunningWorker& s) { return s.running(); });
  if (running >= standby_count_ || a.workers.empty()) return;
  for (const RunningWorker& w : a.workers) {
    if (!w.running() || !w.channel || !w.channel->ready()) return;  // (not yet, or not at all)
    if (w.launch.spawn.argv != a.workers.front().launch.spawn.argv) {
      no_standbys_ = "the workers' command lines differ (a ${local_rank} argument)";
      spdlog::warn("--standby_workers: no standby starts: {}", no_standbys_);
      return;
    }
  }
  const uint64_t number = standbys_started_++;
  std::unique_ptr<InProcessChannel> channel = InProcessChannel::for_standby(inprocess_dir_, number);
  channel->standing_by();
  WorkerLaunch launch = standby_launch(a.workers.front().launch, number, channel->path());
  standby_starting_ = true;
  boost::asio::co_spawn(
      io_,
      [this, launch = std::move(launch),
       channel = std::move(channel)]() mutable -> boost::asio::awaitable<void> {
        RunningWorker standby(std::move(launch));
        standby.channel = std::move(channel);
        try {
          co_await spawn(standby, [this] { return no_standbys_.empty(); });
        } catch (const std::system_error& e) {
          no_standbys_ = e.what();
          spdlog::warn("--standby_workers: cannot start a standby: {}", e.what());
        }
        standby_starting_ = false;
        if (!standby.process) co_return;
        spdlog::info("standby {} started (pid {})", standby.launch.prefix, standby.process->pid());
        standbys_.push_back(std::move(standby));
      },
      boost::asio::detached);
}

bool WorkerGroup::standby_ended(uint64_t serial, const ExitStatus& status) {
  const auto it = std::find_if(standbys_.begin(), standbys_.end(),
                               [serial](const RunningWorker& s) { return s.serial == serial; });
  if (it == standbys_.end()) return false;
  containment_.ended(it->process->pid());
  if (no_standbys_.empty()) {
    no_standbys_ =
        fmt::format("standby pid {} ended before it was needed ({} {}); its output is in {}",
                    it->process->pid(), status.code >= 0 ? "exit code" : "signal",
                    status.code >= 0 ? std::to_string(status.code) : signal_name(-status.code),
                    it->launch.tee_err.file.empty() ? std::string("the agent's stderr")
                                                    : it->launch.tee_err.file);
    spdlog::warn("--standby_workers: {}: failed workers start as new processes from now on",
                 no_standbys_);
  }
  wake();
  return true;
}

}  // namespace ddprun::agent
