#pragma once
// A head-node launch (--hostfile, -H): like mpirun or the DeepSpeed launcher, one command on one
// machine runs the job on every host. The head checks every host over ssh (in parallel, bounded),
// starts one ddprun agent per host with --head_control, relays their output line by line with the
// host in front, forwards its signals to every agent through ssh's stdin, and exits with the job's
// status and its cross-node failure summary. If the head dies, ssh's stdin closes on every host and
// each agent stops its workers.
#include <string_view>

#include "ddprun/agent/environment.hpp"
#include "ddprun/launcher/launch_config.hpp"

namespace ddprun::launcher {

// Runs the job; returns ddprun's exit status (launch_config.hpp). Blocks until every host is done.
int run_head_node(const LaunchConfig& c, const agent::Environment& env);

// An agent started with --head_control prints its failure summary between these lines, so that
// the head prints one copy, not one per host.
constexpr std::string_view kSummaryBegin = "--- ddprun failure summary ---";
constexpr std::string_view kSummaryEnd = "--- end of ddprun failure summary ---";

}  // namespace ddprun::launcher
