#pragma once
// What a workload manager tells a process it started: Slurm's srun (SLURM_*) or Open MPI's mpirun
// (OMPI_COMM_WORLD_*). ddprun reads it so that `srun ddprun train.py` needs no rendezvous flags.
#include <optional>
#include <string>

#include "ddprun/agent/environment.hpp"

namespace ddprun::launcher {

struct SchedulerPlacement {
  std::string scheduler;  // "Slurm" or "Open MPI"
  std::string job_id;     // names the run: Slurm's job id, mpirun's namespace
  int num_nodes = 1;
  int node_rank = 0;
  int tasks_on_node = 1;   // 1: ddprun is this node's agent; more: each task is one worker
  int local_rank = 0;      // the task's index on its node
  int rank = 0;            // the task's index in the job
  int world_size = 1;      // tasks in the job
  std::string first_host;  // the first node of the step (rank 0's); empty when not told
  int port = 0;            // a port derived from the job (and step), in [20000, 30000)
  bool in_step = true;     // false: Slurm's batch script or salloc shell, this node only

  // ddprun runs one worker per task (srun --ntasks-per-node=8, mpirun -np 8) rather than being
  // the node's agent (srun --ntasks-per-node=1).
  bool per_process() const { return tasks_on_node > 1; }
};

// The placement `env` describes, or nullopt when no workload manager started this process. Open
// MPI's variables win over Slurm's (mpirun inside an allocation); Open MPI's node index and count
// are inferred from its default by-slot mapping (the same number of processes on every node).
// Throws std::invalid_argument, naming the variable, when a variable is malformed or they
// contradict each other.
std::optional<SchedulerPlacement> scheduler_placement(const agent::Environment& env);

}  // namespace ddprun::launcher
