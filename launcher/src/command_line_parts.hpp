#pragma once
// The parts of parse_command_line that read more than the command line: a workload manager's
// variables and a head-node launch's hosts. Private to the launcher.
#include <string>

#include "ddprun/agent/environment.hpp"
#include "launch_config.hpp"

namespace ddprun::launcher {

// Fills what Slurm or Open MPI says (scheduler_env.hpp) into the option texts the user did not give
// (c.given): --nnodes, --node_rank, --master_addr, --master_port, --rdzv_id; for a per-process
// launch also c.placement and --nproc_per_node=1. Sets c.scheduler_notice. Throws UsageError.
void apply_scheduler(const agent::Environment& env, LaunchConfig& c, std::string& nnodes,
                     std::string& node_rank, std::string& master_port);

// Reads --hostfile or -H (narrowed by --include/--exclude) into c.hosts and checks the options of a
// head-node launch: the hosts fix --nnodes, node ranks and the first host's static store; a run id
// and a store port are chosen when not given. Throws UsageError.
void parse_head_node(const std::string& hostfile, const std::string& host_list,
                     const std::string& include, const std::string& exclude,
                     const std::string& ssh_port, LaunchConfig& c);

// A random 128-bit run id in hex.
std::string random_run_id();

}  // namespace ddprun::launcher
