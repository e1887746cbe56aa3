#include "node/containment.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "node/reap_killed.hpp"

namespace ddprun::agent {
namespace {

// This process's children: (pid, zombie). Each of its threads lists the children it forked or
// adopted in /proc/self/task/<tid>/children; only those children's stat files are read (not every
// process on the machine).
std::vector<std::pair<pid_t, bool>> children() {
  std::vector<std::pair<pid_t, bool>> out;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return out;
  while (const dirent* t = ::readdir(tasks)) {
    if (t->d_name[0] == '.') continue;
    std::ifstream list(std::string("/proc/self/task/") + t->d_name + "/children");
    long pid = 0;
    while (list >> pid) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      // "pid (comm) state ...": comm may hold spaces and parentheses; it ends at the last ')'.
      const auto close = line.rfind(')');
      if (close == std::string::npos || close + 2 >= line.size()) continue;
      out.emplace_back(static_cast<pid_t>(pid), line[close + 2] == 'Z');
    }
  }
  ::closedir(tasks);
  return out;
}

}  // namespace

Containment::Containment(boost::asio::io_context& io, bool use_cgroups) : sigchld_(io, SIGCHLD) {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    spdlog::warn("cannot become a child subreaper; orphans of workers are not tracked");
  }
  std::string why = "turned off";
  if (use_cgroups) tree_ = CgroupTree::open(why);
  if (tree_) {
    spdlog::debug("each worker runs in a cgroup of its own under {}", tree_->path());
  } else {
    spdlog::debug("workers run in process groups only (no cgroups: {})", why);
  }
  guardian_ = Guardian::start(tree_ ? tree_->path() : std::string());
  if (guardian_) {
    std::random_device random;
    const uint64_t tag = (static_cast<uint64_t>(random()) << 32) | random();
    std::pair<std::string, std::string> marker{fmt::format("DDPRUN_CONTAINED_{:016x}", tag),
                                               std::to_string(::getpid())};
    if (guardian_->mark(marker.first + "=" + marker.second)) marker_ = std::move(marker);
  }
  listen_sigchld();
}

Containment::~Containment() {
  stop_listening();
  reap_orphans(true);
  guardian_.reset();
  tree_.reset();
}

void Containment::listen_sigchld() {
  sigchld_.async_wait([this](boost::system::error_code ec, int) {
    if (ec || !listening_) return;
    if (holds_ > 0) {
      reap_when_held_ = true;
    } else {
      reap_orphans(false);  // orphans that ended on their own leave no zombie
    }
    listen_sigchld();
  });
}

std::unique_ptr<WorkerCgroup> Containment::worker_cgroup() {
  return tree_ ? tree_->make_worker() : nullptr;
}

void Containment::started(pid_t pgid, const std::string& cgroup) {
  workers_.insert(pgid);
  if (guardian_) guardian_->track(pgid, cgroup);
}

void Containment::ended(pid_t pgid) {
  workers_.erase(pgid);
  if (guardian_) guardian_->untrack(pgid);
}

bool Containment::remove_after_a_kill(const std::string& folder) {
  return guardian_ != nullptr && guardian_->remove_at_end(folder);
}

void Containment::kill_orphans() { reap_orphans(true); }

Containment::ReapingHold::~ReapingHold() {
  if (--c_.holds_ == 0 && std::exchange(c_.reap_when_held_, false) && c_.listening_) {
    c_.reap_orphans(false);
  }
}

void Containment::stop_listening() {
  listening_ = false;
  boost::system::error_code ec;
  sigchld_.cancel(ec);
}

void Containment::reap_orphans(bool kill) {
  const pid_t guardian = guardian_ ? guardian_->pid() : -1;
  std::vector<pid_t> reap;
  for (const auto& [pid, zombie] : children()) {
    // Workers are reaped by their own watch; the guardian by its destructor; one that SIGKILL has
    // not ended yet by a thread of its own.
    if (workers_.contains(pid) || pid == guardian || reaped_in_background(pid)) continue;
    if (!zombie && !kill) continue;
    if (!zombie) {
      spdlog::info("killing process {}, left behind by a worker (orphaned, adopted by ddprun)",
                   pid);
      ::kill(pid, SIGKILL);
    }
    reap.push_back(pid);
  }
  // All killed first, then one wait for them all: the agent's thread is held kReapWait at most.
  const auto until = std::chrono::steady_clock::now() + kReapWait;
  for (const pid_t pid : reap) reap_killed(pid, until);
}

}  // namespace ddprun::agent
