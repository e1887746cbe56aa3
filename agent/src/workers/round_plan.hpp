#pragma once
// What each worker of a round gets on this node: its identity, command line, environment, CPUs,
// log files and stream plan (plan_round), and the CPUs --numa-binding gives each local rank.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "ddprun/agent/agent.hpp"
#include "ddprun/agent/numa_binding.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "workers/worker_env.hpp"
#include "workers/worker_launch.hpp"

namespace ddprun::agent {

// Where this node's workers stand among those of their role (ROLE_RANK, ROLE_WORLD_SIZE).
struct RoleRanks {
  int base = 0;   // its first worker's role rank
  int world = 0;  // the role's workers in the round
};

// The launches of this node's workers in `round`, whose store is `master`, restoring the in-memory
// checkpoint `checkpoint` where there is one; creates the attempt's log folders under
// `attempt_dir`.
std::vector<WorkerLaunch> plan_round(const AgentConfig& cfg,
                                     const std::filesystem::path& attempt_dir,
                                     const rendezvous::Round& round,
                                     const rendezvous::WorkerStoreAddress& master,
                                     const std::map<int, CpuSet>& bindings,
                                     const std::optional<CheckpointRestore>& checkpoint,
                                     RoleRanks roles);

// Each of this node's workers' local rank and global rank in `round`, in the launches' order.
std::vector<std::pair<int, int>> round_ranks(const AgentConfig& cfg,
                                             const rendezvous::Round& round);
// The local ranks of the agent's workers, in order (under srun or mpirun its one task's own).
std::vector<int> local_ranks(const AgentConfig& cfg);

// --numa-binding: the CPUs of each local rank's worker, from its accelerator (the one whose index
// is its local rank); empty without the flag. Throws std::runtime_error naming the mode and
// torch's reason.
std::map<int, CpuSet> numa_bindings(const AgentConfig& cfg);

}  // namespace ddprun::agent
