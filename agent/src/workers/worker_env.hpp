#pragma once
// The environment contract between the agent and a worker (torchrun's, reference/torchrun.md 2.1).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/agent/environment.hpp"

namespace ddprun::agent {

// Where one worker stands in the job.
struct WorkerIdentity {
  int local_rank = 0;
  int rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  int role_rank = 0;
  int role_world_size = 1;
};

// The in-memory checkpoint the agents agreed a round's workers restore.
struct CheckpointRestore {
  int64_t step = 0;     // DDPRUN_CHECKPOINT_STEP
  int saved_world = 0;  // the world size it was saved with (DDPRUN_CHECKPOINT_WORLD)
  // Where the world size changed: the folder in which the agent gathered every saved rank's slot
  // of the step, for torch.distributed.checkpoint to reshard from (DDPRUN_CHECKPOINT_RESHARD);
  // empty otherwise.
  std::string reshard_dir;
};

// What every worker of one attempt shares.
struct AttemptEnvironment {
  std::string role = "default";
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id = "none";
  bool use_agent_store = true;
  bool virtual_local_rank = false;
  // The agent's workers, whose checkpoint regions share its folder (DDPRUN_CHECKPOINT_SLOTS).
  int checkpoint_slots = 1;
  // The in-memory checkpoint the agents agreed the workers restore; nullopt: none.
  std::optional<CheckpointRestore> checkpoint;
};

// The agent's environment plus RANK, LOCAL_RANK, WORLD_SIZE, ... , TORCHELASTIC_*, both spellings
// of the NCCL async error handling switch (TORCH_NCCL_ for torch >= 2.2, NCCL_ for 1.13; the
// agent's own values win), and CUDA_VISIBLE_DEVICES narrowed to one device with virtual_local_rank.
// DDPRUN_CHECKPOINT_SLOT names the worker's checkpoint region (rank<N> in the agent's folder, N its
// local rank: under virtual_local_rank LOCAL_RANK is 0 in every worker, and the region is still
// its own), and DDPRUN_CHECKPOINT_SLOTS says how many workers' regions share that folder.
Environment worker_environment(const Environment& agent_env, const AttemptEnvironment& attempt,
                               const WorkerIdentity& id, const std::string& error_file);

// The variables whose values differ between the workers of a node or between rounds: those
// worker_environment sets from the identity and the attempt, the error file, and the heartbeat
// file (DDPRUN_HEARTBEAT_FILE, set by the worker group), and a standby's mark
// (DDPRUN_STANDBY). The rest of a worker's environment is the
// node's, the same for every worker of every round while the agent runs.
bool is_per_worker_variable(std::string_view name);
// `env` without the per-worker variables.
Environment shared_part(const Environment& env);

}  // namespace ddprun::agent
