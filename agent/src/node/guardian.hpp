#pragma once
// Cleans up after an agent that is SIGKILLed, which cannot clean up itself: a small process forked
// at start, in a process group of its own, holding the read end of a pipe from the agent. The
// agent lists each worker's process group and cgroup as it starts and unlists it once stopped and
// reaped. When the pipe closes (the agent is gone, however it died), the guardian SIGKILLs every
// process group and cgroup still listed and, unless the agent said it ended as it should (the
// destructor), every process whose environment began with the workers' mark (mark()); removes
// those cgroups, and exits, within 30 s whatever it meets. After fork() it runs
// only async-signal-safe code over fixed tables.
#include <sys/types.h>

#include <memory>
#include <string>

namespace ddprun::agent {

class Guardian {
 public:
  // Forks the guardian; nullptr (with a warning) when it cannot. `cgroup_tree`: removed too at the
  // end (empty: none).
  static std::unique_ptr<Guardian> start(const std::string& cgroup_tree);
  // Tells the guardian this agent ended as it should and closes the pipe: with nothing listed, the
  // guardian just exits (waited for 5 s at most).
  ~Guardian();
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  pid_t pid() const { return pid_; }
  void track(pid_t pgid, const std::string& cgroup);
  void untrack(pid_t pgid);
  // `folder` (and what it holds, up to 3 levels of subfolders) is removed too when the agent is
  // gone (the first 4 folders named); false where it cannot be listed (a path longer than a record
  // holds).
  bool remove_at_end(const std::string& folder);
  // `entry` ("NAME=value"), in every worker's environment, marks the processes to kill when the
  // agent is gone, wherever they went: /proc/<pid>/environ is what a process began with, which a
  // fork inherits and an exec passes on (unless the program drops it). False where it cannot be
  // listed.
  bool mark(const std::string& entry);

 private:
  Guardian(int fd, pid_t pid) : fd_(fd), pid_(pid) {}
  int fd_;
  pid_t pid_;
};

}  // namespace ddprun::agent
