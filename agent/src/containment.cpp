#include "ddprun/agent/containment.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <spdlog/spdlog.h>

namespace ddprun::agent {
namespace {

// This process's children, from /proc/<pid>/stat (parent pid and state): (pid, zombie).
std::vector<std::pair<pid_t, bool>> children() {
  std::vector<std::pair<pid_t, bool>> out;
  const pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the last ')'.
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 4 >= line.size()) continue;
    const char state = line[close + 2];
    const long ppid = std::strtol(line.c_str() + close + 4, nullptr, 10);
    if (ppid == self) out.emplace_back(static_cast<pid_t>(pid), state == 'Z');
  }
  ::closedir(proc);
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
    reap_orphans(false);  // orphans that ended on their own leave no zombie
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

void Containment::kill_orphans() { reap_orphans(true); }

void Containment::stop_listening() {
  listening_ = false;
  boost::system::error_code ec;
  sigchld_.cancel(ec);
}

void Containment::reap_orphans(bool kill) {
  const pid_t guardian = guardian_ ? guardian_->pid() : -1;
  for (const auto& [pid, zombie] : children()) {
    // Workers are reaped by their own watch; the guardian by its destructor.
    if (workers_.contains(pid) || pid == guardian) continue;
    if (!zombie && !kill) continue;
    if (!zombie) {
      spdlog::info("killing process {}, left behind by a worker (orphaned, adopted by ddprun)",
                   pid);
      ::kill(pid, SIGKILL);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
}

}  // namespace ddprun::agent
