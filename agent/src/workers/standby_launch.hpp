#pragma once
// --standby_workers: what a standby process starts with (worker_group.hpp, keep_standbys), and
// where a worker's output shows on the console, which a standby takes on with the worker's place.
// A standby runs the script without a rank up to ddprun.inprocess.run() and waits there until the
// agent gives it a failed worker's place.
#include <cstdint>
#include <memory>
#include <string>

#include "workers/worker_launch.hpp"

namespace ddprun::agent {

// Standby number `number`'s launch, made from a worker's `sample`: the same command line and the
// node's shared environment, with the per-worker variables that are the same for every worker of
// the node (CUDA_VISIBLE_DEVICES as the agent has it, LOCAL_WORLD_SIZE, ROLE_NAME,
// TORCHELASTIC_RUN_ID, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_USE_AGENT_STORE: the caller makes
// sure they are) but none that name a worker or a round (no RANK, LOCAL_RANK, WORLD_SIZE,
// MASTER_*, error file), with DDPRUN_STANDBY=1 and DDPRUN_INPROCESS_FILE=`channel_path`; no CPU
// binding. Both its streams go through the agent (so that they can follow the worker whose place it
// takes): to files in the folder "standby<number>" beside the sample's (created here) where the
// sample's go to files, and to the console where the sample's do, prefixed "[standby<number>]:".
// Local rank and rank -1.
WorkerLaunch standby_launch(const WorkerLaunch& sample, uint64_t number,
                            const std::string& channel_path);

// Where one of a worker's streams shows on the console: the descriptor (-1: nowhere, and then
// nothing else), the prefix ("": as written) and the file of lines matching
// --duplicate_*_filters (null: none).
struct ConsoleRoute {
  int fd = -1;
  std::string prefix;
  std::shared_ptr<FilteredLog> duplicate;
  bool operator==(const ConsoleRoute&) const = default;
};

// Where worker `l`'s stdout (`err` false) or stderr shows on the console.
ConsoleRoute console_route(const WorkerLaunch& l, bool err);

}  // namespace ddprun::agent
