#pragma once
// The failure summary printed when a worker group fails, in torchrun's layout
// (reference/torchrun.md 3.6), with sub-second times and the cause of a signal death spelled out.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/agent/error_file.hpp"

namespace ddprun::agent {

struct WorkerFailure {
  int local_rank = 0;
  int rank = 0;
  int pid = 0;
  int exitcode = 0;                            // > 0: exit status; < 0: killed by signal -exitcode
  std::chrono::system_clock::time_point time;  // when the agent saw the exit
  std::string error_file;                      // the path when the worker wrote one, else empty
  std::optional<ErrorRecord> error;
  bool sigkill_sent_by_ddprun = false;
  bool oom_killed = false;  // the worker's cgroup counted an OOM kill (memory.events)
  std::string host;         // the node it ran on; empty: the host given to format_failure_summary
  // Set when ddprun ended it on its own account: a torch expiration timer that ran out (which one,
  // by how much), a hang (how long without progress, where it was).
  std::string ended_because{};
};

// Whether `a` failed before `b`, as torch orders failures to name the root cause
// (ChildFailedError.get_first_failure): by its error file's timestamp where it wrote one, else by
// when it was seen, in whole seconds; within one second, by when each was seen (torch takes the
// first rank there), then by rank.
bool failed_earlier(const WorkerFailure& a, const WorkerFailure& b);

// The root cause is the earliest failure (failed_earlier); the others are listed under "Failures".
std::string format_failure_summary(const std::string& entrypoint, const std::string& host,
                                   const std::vector<WorkerFailure>& failures);

// The one-line description used in the summary's traceback field and in logs.
std::string describe_failure(const WorkerFailure& f);

}  // namespace ddprun::agent
