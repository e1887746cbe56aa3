#pragma once
// --standby_workers: what a standby process starts with (worker_group.hpp, keep_standbys). A
// standby runs the script without a rank up to ddprun.inprocess.run() and waits there until the
// agent gives it a failed worker's place.
#include <cstdint>
#include <string>

#include "workers/worker_launch.hpp"

namespace ddprun::agent {

// Standby number `number`'s launch, made from a worker's `sample`: the same command line and the
// node's shared environment (none of the per-worker variables: no RANK, LOCAL_RANK, WORLD_SIZE,
// MASTER_*, error file), with DDPRUN_STANDBY=1 and DDPRUN_INPROCESS_FILE=`channel_path`; no CPU
// binding; its logs in the folder "standby<number>" beside the sample's (created here), its
// console lines prefixed "[standby<number>]:"; local rank and rank -1.
WorkerLaunch standby_launch(const WorkerLaunch& sample, uint64_t number,
                            const std::string& channel_path);

}  // namespace ddprun::agent
