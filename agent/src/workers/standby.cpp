#include <sched.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/agent/signals.hpp"
#include "logs/event_log.hpp"
#include "logs/log_pump.hpp"
#include "logs/python_traceback.hpp"
#include "workers/standby_launch.hpp"
#include "workers/warm_interpreter.hpp"
#include "workers/worker_env.hpp"
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

// The folder of a standby's log files ("" none).
std::string files_of(const WorkerLaunch& standby) {
  for (const StreamTarget* t : {&standby.spawn.out, &standby.spawn.err}) {
    if (t->kind == StreamTarget::Kind::kFile) {
      return std::filesystem::path(t->path).parent_path().string();
    }
  }
  for (const TeeTarget* t : {&standby.tee_out, &standby.tee_err}) {
    if (!t->file.empty()) return std::filesystem::path(t->file).parent_path().string();
  }
  return {};
}

// Where a standby's output goes, for the log.
std::string output_of(const WorkerLaunch& standby) {
  if (const std::string dir = files_of(standby); !dir.empty()) return "in " + dir;
  return console_route(standby, false).fd >= 0 || console_route(standby, true).fd >= 0
             ? "on the console only"
             : "not shown (local rank 0's is filtered out)";
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
  if (!told_to_resume(standby, rw.launch.spawn.env)) return false;
  rw.take_process_of(standby);
  for (auto& pump : rw.pumps) {  // its console lines as the worker's would be
    const ConsoleRoute route = console_route(rw.launch, pump == rw.err_pump);
    pump->redirect_console(route.fd, route.prefix, route.duplicate);
  }
  if (!rw.launch.spawn.cpus.empty()) bind_threads(rw.process->pid(), rw.launch.spawn.cpus);
  ++a.running;
  const std::string files = files_of(standby.launch);
  spdlog::info("local rank {} (rank {}) runs in standby process {}{}", rw.launch.id.local_rank,
               rw.launch.id.rank, rw.process->pid(),
               files.empty() ? std::string() : " (its output files stay in " + files + ")");
  if (event_log_ != nullptr) {
    event_log_->record("standby_adopted", {{"local_rank", rw.launch.id.local_rank},
                                           {"rank", rw.launch.id.rank},
                                           {"pid", rw.process->pid()}});
  }
  return true;
}

std::vector<const WorkerLaunch*> WorkerGroup::standby_samples() const {
  std::vector<const WorkerLaunch*> launches;
  if (active_) {
    for (const RunningWorker& w : attempt_->workers) launches.push_back(&w.launch);
  } else {
    for (const WorkerLaunch& l : spare_sample_) launches.push_back(&l);
  }
  return launches;
}

bool WorkerGroup::standbys_can_follow(const std::vector<const WorkerLaunch*>& launches) {
  const WorkerLaunch& first = *launches.front();
  const auto devices = [](const WorkerLaunch& l) {
    const auto it = l.spawn.env.find("CUDA_VISIBLE_DEVICES");
    return it == l.spawn.env.end() ? std::optional<std::string>() : it->second;
  };
  for (const WorkerLaunch* l : launches) {
    if (l->spawn.argv != first.spawn.argv) {
      no_standbys_ = "the workers' command lines differ (a ${local_rank} argument)";
    } else if (devices(*l) != devices(first)) {
      no_standbys_ =
          "each worker sees its own CUDA_VISIBLE_DEVICES (--virtual-local-rank), which a "
          "standby could not know before its CUDA set-up";
    }
    if (!no_standbys_.empty()) break;
  }
  if (no_standbys_.empty() && (standby_stream(launches, false) == StandbyStream::kNone ||
                               standby_stream(launches, true) == StandbyStream::kNone)) {
    no_standbys_ =
        "some workers' output goes to files and some workers' does not (per-rank --tee or "
        "--redirects), which a standby could not follow";
  }
  if (no_standbys_.empty()) return true;
  spdlog::warn("--standby_workers: no standby starts: {}", no_standbys_);
  return false;
}

// Whether a standby may start now; where none ever may, no_standbys_ says why.
bool WorkerGroup::standby_wanted() {
  if (standby_count_ == 0 || standby_starting_ || !no_standbys_.empty()) return false;
  const auto running = std::count_if(standbys_.begin(), standbys_.end(),
                                     [](const RunningWorker& s) { return s.running(); });
  if (running >= standby_count_) return false;
  if (!active_) {  // a spare node: as soon as a standby would start warm
    return !spare_sample_.empty() && (warm_ == nullptr || warm_->settled(kWarmReadyLimit)) &&
           standbys_can_follow(standby_samples());
  }
  Attempt& a = *attempt_;
  if (a.phase != AttemptPhase::kRunning || a.workers.empty()) return false;
  for (const RunningWorker& w : a.workers) {
    if (!w.running() || !w.channel || !w.channel->ready()) return false;  // (not yet, or not all)
  }
  if (!standbys_can_follow(standby_samples())) return false;
  // Every worker runs its training: a while later, so that the standby's start does not compete
  // with theirs.
  const auto now = std::chrono::steady_clock::now();
  if (!a.workers_ready) a.workers_ready = now;
  return now >= *a.workers_ready + kStandbyDelay;
}

void WorkerGroup::stand_by_as_spare(std::vector<WorkerLaunch> sample) {
  if (standby_count_ == 0 || inprocess_dir_.empty() || active_ || sample.empty()) return;
  spare_sample_ = std::move(sample);
  // (Not while a standby's fork waits for its answer on the interpreter's socket.)
  if (warm_ != nullptr && !standby_starting_) {
    warm_->prepare(shared_part(spare_sample_.front().spawn.env));
  }
  stand_by_while_spare();  // (a look already pending is replaced)
}

void WorkerGroup::stand_by_while_spare() {
  top_up_standbys();
  spare_timer_.expires_after(kSparePoll);
  spare_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    const auto running = std::count_if(standbys_.begin(), standbys_.end(),
                                       [](const RunningWorker& s) { return s.running(); });
    if (active_ || spare_sample_.empty() || !no_standbys_.empty() ||
        (running >= standby_count_ && !standby_starting_)) {
      return;
    }
    stand_by_while_spare();
  });
}

void WorkerGroup::top_up_standbys() {
  if (!standby_wanted()) return;
  const uint64_t number = standbys_started_++;
  std::unique_ptr<InProcessChannel> channel = InProcessChannel::for_standby(inprocess_dir_, number);
  WorkerLaunch launch;
  try {
    channel->standing_by();
    const std::vector<const WorkerLaunch*> launches = standby_samples();
    launch = standby_launch(*launches.front(), number, channel->path(),
                            standby_stream(launches, false), standby_stream(launches, true));
  } catch (const std::exception& e) {
    no_standbys_ = e.what();
    spdlog::warn("--standby_workers: cannot start a standby: {}", e.what());
    return;
  }
  standby_starting_ = true;
  boost::asio::co_spawn(
      io_,
      [this, launch = std::move(launch),
       channel = std::move(channel)]() mutable -> boost::asio::awaitable<void> {
        RunningWorker standby(std::move(launch));
        standby.channel = std::move(channel);
        bool whole = false;  // its process, pumps and exit's watch all set up
        try {
          co_await spawn(standby, [this] { return no_standbys_.empty(); });
          whole = true;
        } catch (const std::exception& e) {
          if (no_standbys_.empty()) no_standbys_ = e.what();
          spdlog::warn("--standby_workers: cannot start a standby: {}", e.what());
        }
        standby_starting_ = false;
        if (!standby.process) co_return;
        if (!whole || !no_standbys_.empty()) {  // half started, or the job ended meanwhile
          containment_.ended(standby.process->pid());
          for (auto& pump : standby.pumps) pump->finish();
          co_return;  // (its process is killed and reaped with it)
        }
        spdlog::info("standby process {} started; its output is {}", standby.process->pid(),
                     output_of(standby.launch));
        standbys_.push_back(std::move(standby));
      },
      boost::asio::detached);
}

boost::asio::awaitable<void> WorkerGroup::standby_start_ended() {
  const auto give_up_at = std::chrono::steady_clock::now() + kStandbyStartLimit;
  for (boost::asio::steady_timer poll(io_);
       standby_starting_ && std::chrono::steady_clock::now() < give_up_at;) {
    poll.expires_after(kStandbyPoll);
    co_await poll.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  }
}

bool WorkerGroup::standby_ended(uint64_t serial, const ExitStatus& status) {
  const auto it = std::find_if(standbys_.begin(), standbys_.end(),
                               [serial](const RunningWorker& s) { return s.serial == serial; });
  if (it == standbys_.end()) return false;
  containment_.ended(it->process->pid());
  if (no_standbys_.empty()) {
    // (what it said last on stderr, where the agent reads it)
    const std::string said = it->err_pump ? last_line(it->err_pump->tail()) : std::string();
    no_standbys_ = fmt::format(
        "standby pid {} ended before it was needed ({} {}{}); its output is {}", it->process->pid(),
        status.code >= 0 ? "exit code" : "signal",
        status.code >= 0 ? std::to_string(status.code) : signal_name(-status.code),
        said.empty() ? std::string() : ", its last words: " + said, output_of(it->launch));
    spdlog::warn("--standby_workers: {}: failed workers start as new processes from now on",
                 no_standbys_);
  }
  wake();
  return true;
}

}  // namespace ddprun::agent
