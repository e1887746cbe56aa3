#pragma once
// What a worker is launched with: its identity, how it is spawned, where its teed output goes, its
// console prefix and its error file. round_plan.hpp makes one per local rank for each round.
#include <memory>
#include <string>

#include "ddprun/agent/worker_process.hpp"
#include "workers/worker_env.hpp"

namespace ddprun::agent {

class FilteredLog;

// Where a teed stream goes besides its pipe.
struct TeeTarget {
  std::string file;     // the log file
  int console_fd = -1;  // STDOUT_FILENO / STDERR_FILENO, or -1 when filtered out
  // The attempt's file of console lines matching --duplicate_*_filters (shared by the workers), or
  // null.
  std::shared_ptr<FilteredLog> duplicate;
  bool raw = false;  // console lines as the worker wrote them, without the prefix
};

struct WorkerLaunch {
  WorkerIdentity id;
  SpawnSpec spawn;  // StreamTarget::kPipe streams are teed to the targets below
  TeeTarget tee_out;
  TeeTarget tee_err;
  std::string prefix;      // console prefix of teed lines
  std::string error_file;  // TORCHELASTIC_ERROR_FILE
};

}  // namespace ddprun::agent
