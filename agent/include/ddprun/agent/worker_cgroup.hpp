#pragma once
// cgroup v2 containment of workers: every process a worker starts, whatever it does with sessions
// and process groups (setsid, double forks), stays in the worker's cgroup, and the whole cgroup is
// killed at once (cgroup.kill). Used where this agent's own cgroup, in a cgroup2 hierarchy, is
// writable (root, or a delegated subtree); elsewhere workers fall back to their process groups.
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::agent {

// Where this process's cgroup v2 directory is, from /proc/self/mountinfo and /proc/self/cgroup
// (their text given, for tests): the cgroup2 mount point joined with the "0::" path. nullopt when
// there is no cgroup2 mount or no v2 line.
std::optional<std::string> own_cgroup_dir(std::string_view mountinfo, std::string_view cgroup);

// "oom_kill N" of a memory.events file's text; 0 when absent.
long oom_kills(std::string_view memory_events);

class WorkerCgroup;

// This agent's folder of worker cgroups, "<own cgroup>/ddprun.<pid>", removed when it goes (after
// killing what is left in it). Always a folder it created: one left by a killed agent that had the
// same pid (its guardian killed too) is not taken over but passed by ("ddprun.<pid>.<n>").
class CgroupTree {
 public:
  // The tree, or nullopt with `why` saying why not (no cgroup2, not writable, no cgroup.kill).
  static std::unique_ptr<CgroupTree> open(std::string& why);
  ~CgroupTree();

  const std::string& path() const { return path_; }
  // A new, empty cgroup for one worker; nullptr (and a warning) when it cannot be made.
  std::unique_ptr<WorkerCgroup> make_worker();

 private:
  explicit CgroupTree(std::string path) : path_(std::move(path)) {}
  std::string path_;
  int next_ = 0;
};

class WorkerCgroup {
 public:
  explicit WorkerCgroup(std::string path);
  // Kills what is left and removes the folder (bounded wait for the kernel to empty it).
  ~WorkerCgroup();
  WorkerCgroup(const WorkerCgroup&) = delete;
  WorkerCgroup& operator=(const WorkerCgroup&) = delete;

  const std::string& path() const { return path_; }
  // A descriptor of cgroup.procs, open for writing: a forked child writes "0" to it to move
  // itself in (async-signal-safe). Owned by this object.
  int procs_fd() const { return procs_fd_; }
  // A descriptor of the cgroup's folder (O_PATH), for clone3's CLONE_INTO_CGROUP. Owned by this
  // object.
  int dir_fd() const { return dir_fd_; }
  // SIGKILL to every process in it, at once.
  void kill_all();
  // `signo` to every process in it now.
  void signal_all(int signo);
  std::vector<pid_t> processes() const;
  bool populated() const;
  // The kernel's OOM killer killed a process in it (memory.events, where the memory controller is
  // enabled for it).
  bool oom_killed() const;

 private:
  std::string path_;
  int procs_fd_ = -1;
  int dir_fd_ = -1;
};

}  // namespace ddprun::agent
