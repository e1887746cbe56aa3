#pragma once
// Slurm's compressed host lists (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST) and task counts
// (SLURM_TASKS_PER_NODE), expanded the way Slurm's hostlist.c reads them, so that no `scontrol`
// is needed on the node.
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// "node[01-04,07],gpu-[1-2]" -> node01 node02 node03 node04 node07 gpu-1 gpu-2. Names are separated
// by ',' or whitespace outside brackets; each bracket group holds numbers and lo-hi ranges, a low
// bound's digit count fixes the width (zero padding), and several groups in one name multiply
// (rack[1-2]-n[1-2] -> rack1-n1 rack1-n2 rack2-n1 rack2-n2). Throws std::invalid_argument on a
// malformed list (unbalanced or nested brackets, an empty or reversed range, a non-number in a
// bracket, no name at all) or one naming more than kMaxHosts hosts.
std::vector<std::string> expand_hostlist(std::string_view list);
constexpr size_t kMaxHosts = 1 << 20;

// "2(x3),1" -> {2, 2, 2, 1}. Throws std::invalid_argument on anything else.
std::vector<int> expand_tasks_per_node(std::string_view text);

}  // namespace ddprun::launcher
