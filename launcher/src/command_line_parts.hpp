#pragma once
// The stages of parse_command_line before the texts become values: the options as given, and what
// a workload manager's variables and a head-node launch's hosts fill in. Private to the launcher.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ddprun/agent/environment.hpp"
#include "launch_config.hpp"

namespace ddprun::launcher {

// Every option of option_table() by its dest, as the command line or PET_* gave it, or as a stage
// below filled it in; an option nobody gave has torchrun's default text or none. Each text is
// parsed once, into LaunchConfig, after these stages.
struct OptionTexts {
  std::map<std::string, std::string> text;                // options with a value
  std::map<std::string, std::vector<std::string>> lists;  // repeated options
  std::map<std::string, bool> flags;                      // options without a value
  std::set<std::string> given;                            // by the command line or PET_*

  // The text of `dest`: "" when it has none.
  const std::string& operator[](const std::string& dest) const;
  bool flag(const std::string& dest) const;
  // Sets `dest` to `value` unless the user gave it; returns whether it did.
  bool fill(const std::string& dest, const std::string& value);
};

// Fills what Slurm or Open MPI says (scheduler_env.hpp) into the options the user did not give:
// --nnodes, --node_rank, --master_addr, --master_port, --rdzv_id; for a per-process launch also
// --nproc_per_node=1 and c.placement. Sets c.scheduler_notice. Throws UsageError.
void apply_scheduler(const agent::Environment& env, OptionTexts& o, LaunchConfig& c);

// Reads --hostfile or -H (narrowed by --include/--exclude) into c.hosts and checks the options of a
// head-node launch: the hosts fix --nnodes and the first host's static store (--master_addr); a run
// id and a store port are chosen when not given. Throws UsageError.
void parse_head_node(OptionTexts& o, LaunchConfig& c);

// A random 128-bit run id in hex.
std::string random_run_id();

}  // namespace ddprun::launcher
