#pragma once
// How the agent starts a worker's process, and what that process does before its exec.
//
// Where it can (x86-64, Linux 5.7+: clone3 with CLONE_INTO_CGROUP), the child shares the agent's
// memory and runs on a stack of its own while the calling thread waits for its exec (what
// posix_spawn does, which cannot set a parent-death signal): no copy of the agent's page tables, no
// copy-on-write faults in either process, no code paged in again in the child, and an exec that
// has nothing to tear down. With 8 workers that was half of the agent's own CPU time per worker.
// Elsewhere it is a plain fork (into the cgroup where the kernel can).
//
// Either way the child runs only async-signal-safe calls over what ChildPlan holds, prepared by
// the parent beforehand, and allocates nothing: while it shares the agent's memory, another of
// the agent's threads may hold a lock.
#include <sched.h>
#include <sys/types.h>

#include <vector>

namespace ddprun::agent {

struct ChildPlan {
  char* const* argv = nullptr;  // argv[0] is looked up in PATH
  char* const* envp = nullptr;
  int in_fd = -1;           // dup2()ed to its stdin; -1: inherited
  int out_fd = -1;          // to its stdout
  int err_fd = -1;          // to its stderr
  int pass_fd = -1;         // becomes its fd 3 (kept across exec); -1: none
  int cgroup_dir = -1;      // the folder of the cgroup it is created in; -1: none
  int cgroup_procs = -1;    // that cgroup's cgroup.procs, should it have to move itself in
  pid_t parent = 0;         // the agent: the child ends at once if it is not its parent any more
  bool debuggable = false;  // PR_SET_PTRACER for the agent
  bool bind = false;        // sched_setaffinity to `cpus`
  cpu_set_t cpus{};
  int report_fd = -1;  // written on failure: errno of the exec, or minus that of the binding
  // Set by start_child: the descriptors open when it started, where the kernel cannot mark a
  // range close-on-exec (close_range's CLOSE_RANGE_CLOEXEC, Linux 5.11; empty where it can), and
  // whether the child was created inside its cgroup already.
  std::vector<int> listed;
  bool in_cgroup = false;
};

// Starts a child that runs `plan` and execs; its pid, or -1 with errno set. Every signal stays
// blocked in the calling thread, and so in the child, until the child has put back the default
// dispositions: a stop signal that reaches it before its exec must not run the agent's handlers
// there (they would report it to the agent as the agent's own signal, through the descriptors
// they share).
pid_t start_child(ChildPlan& plan);

}  // namespace ddprun::agent
