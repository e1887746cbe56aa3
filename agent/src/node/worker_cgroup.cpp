#include "ddprun/agent/worker_cgroup.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace ddprun::agent {
namespace {

// Folders of this agent's name left by killed agents that are passed by before giving up.
constexpr int kMaxLeftTrees = 16;

std::string read_or_empty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool write_file(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// The value of `key` in a "key value" per line file (cgroup.events, memory.events), or -1.
long field(std::string_view text, std::string_view key) {
  std::istringstream in{std::string(text)};
  std::string k;
  long v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return -1;
}

}  // namespace

std::optional<std::string> own_cgroup_dir(std::string_view mountinfo, std::string_view cgroup) {
  std::optional<std::string> mount;
  std::istringstream lines{std::string(mountinfo)};
  for (std::string line; std::getline(lines, line);) {
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS"
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream after(line.substr(dash + 3));
    std::string fstype;
    after >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream before(line.substr(0, dash));
    std::string id, parent, dev, root, point;
    before >> id >> parent >> dev >> root >> point;
    if (root == "/") {
      mount = point;
      break;
    }
  }
  if (!mount) return std::nullopt;
  std::istringstream groups{std::string(cgroup)};
  for (std::string line; std::getline(groups, line);) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string path = line.substr(3);
    if (path == "/") path.clear();
    return *mount + path;
  }
  return std::nullopt;
}

long oom_kills(std::string_view memory_events) {
  return std::max(0L, field(memory_events, "oom_kill"));
}

std::unique_ptr<CgroupTree> CgroupTree::open(std::string& why) {
  const auto own =
      own_cgroup_dir(read_or_empty("/proc/self/mountinfo"), read_or_empty("/proc/self/cgroup"));
  if (!own) {
    why = "no cgroup v2 hierarchy for this process";
    return nullptr;
  }
  std::string path;
  for (int n = 0;; ++n) {
    path = n == 0 ? fmt::format("{}/ddprun.{}", *own, ::getpid())
                  : fmt::format("{}/ddprun.{}.{}", *own, ::getpid(), n);
    if (::mkdir(path.c_str(), 0755) == 0) break;
    if (errno != EEXIST || n == kMaxLeftTrees) {
      why = fmt::format("cannot create {}: {}", path, std::strerror(errno));
      return nullptr;
    }
  }
  if (::access((path + "/cgroup.kill").c_str(), W_OK) != 0) {
    ::rmdir(path.c_str());
    why = "the kernel has no cgroup.kill (before Linux 5.14)";
    return nullptr;
  }
  return std::unique_ptr<CgroupTree>(new CgroupTree(path));
}

CgroupTree::~CgroupTree() {
  // Worker cgroups not removed yet (still emptying when their worker went): killed and removed,
  // within a bounded time.
  for (int i = 0; i < next_; ++i) {
    const std::string w = fmt::format("{}/w{}", path_, i);
    if (::access(w.c_str(), F_OK) != 0) continue;
    WorkerCgroup leftover(w);
  }
  if (::rmdir(path_.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("cannot remove the cgroup folder {}: {}", path_, std::strerror(errno));
  }
}

std::unique_ptr<WorkerCgroup> CgroupTree::make_worker() {
  const std::string path = fmt::format("{}/w{}", path_, next_++);
  if (::mkdir(path.c_str(), 0755) != 0) {
    spdlog::warn(
        "cannot create the worker cgroup {}: {}; the worker runs in its process group only", path,
        std::strerror(errno));
    return nullptr;
  }
  auto g = std::make_unique<WorkerCgroup>(path);
  if (g->procs_fd() < 0) {
    spdlog::warn("cannot open {}/cgroup.procs: {}", path, std::strerror(errno));
    return nullptr;
  }
  return g;
}

WorkerCgroup::WorkerCgroup(std::string path)
    : path_(std::move(path)),
      procs_fd_(::open((path_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC)),
      dir_fd_(::open(path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)) {}

WorkerCgroup::~WorkerCgroup() {
  if (procs_fd_ >= 0) ::close(procs_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  kill_all();
  // The kernel empties it as the killed processes exit, within milliseconds; one still busy is
  // removed with the tree.
  for (int i = 0; i < 50 && populated(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::rmdir(path_.c_str());
}

void WorkerCgroup::kill_all() {
  if (populated()) write_file(path_ + "/cgroup.kill", "1");
}

void WorkerCgroup::signal_all(int signo) {
  for (pid_t p : processes()) ::kill(p, signo);
}

std::vector<pid_t> WorkerCgroup::processes() const {
  std::vector<pid_t> out;
  std::istringstream in(read_or_empty(path_ + "/cgroup.procs"));
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

bool WorkerCgroup::populated() const {
  return field(read_or_empty(path_ + "/cgroup.events"), "populated") > 0;
}

bool WorkerCgroup::oom_killed() const {
  return oom_kills(read_or_empty(path_ + "/memory.events")) > 0;
}

}  // namespace ddprun::agent
