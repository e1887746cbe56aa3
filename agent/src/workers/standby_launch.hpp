#pragma once
// --standby_workers: what a standby process starts with (worker_group.hpp, keep_standbys), and
// how its output follows the worker whose place it takes. A standby runs the script without a
// rank up to ddprun.inprocess.run() and waits there until the agent gives it a failed worker's
// place.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "workers/worker_launch.hpp"

namespace ddprun::agent {

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

// How a standby's stream follows the worker whose place it takes, from the node's `workers`:
//   kSame     every worker's goes the same way (the same kind of target, console route but for
//             the prefix, a file or none): the standby's goes that way too (a terminal stays one);
//   kThrough  they show differently on the console (--local_ranks_filter) but have files all or
//             none: the standby's goes through the agent, which routes it as the worker's once it
//             takes a place;
//   kNone     some have a file and some not (per-rank --tee or --redirects): no standby can
//             follow them.
enum class StandbyStream { kSame, kThrough, kNone };
StandbyStream standby_stream(const std::vector<const WorkerLaunch*>& workers, bool err);

// Standby number `number`'s launch, made from a worker's `sample`: the same command line and the
// node's shared environment, with the per-worker variables that are the same for every worker of
// the node (CUDA_VISIBLE_DEVICES as the agent has it, LOCAL_WORLD_SIZE, ROLE_NAME,
// TORCHELASTIC_RUN_ID, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_USE_AGENT_STORE: the caller makes
// sure they are) but none that name a worker or a round (no RANK, LOCAL_RANK, WORLD_SIZE,
// MASTER_*, error file), with DDPRUN_STANDBY=1 and DDPRUN_INPROCESS_FILE=`channel_path`; no CPU
// binding. Its streams go as `out` and `err` say (not kNone), on the console as the sample's, with
// the prefix "[standby<number>]:" where the sample's lines have one, and to files in the folder
// "standby<number>" beside the sample's (created here) where the sample's go to files. Local rank
// and rank -1.
WorkerLaunch standby_launch(const WorkerLaunch& sample, uint64_t number,
                            const std::string& channel_path, StandbyStream out, StandbyStream err);

}  // namespace ddprun::agent
