#pragma once
// A head-node launch (--hostfile, -H): like mpirun or the DeepSpeed launcher, one command on one
// machine runs the job on every host. One ssh session per host first checks that ddprun is there,
// says so, and then becomes that host's agent (--head_control). The head waits, bounded, until
// every host is ready. If any is not, it stops the others, which are still waiting for the missing
// ones in the rendezvous (no worker has started), and reports every host that failed with ssh's
// reason. Otherwise it relays their output line by line with the host in front, forwards its
// signals to every agent through ssh's stdin, and exits with the job's status and its cross-node
// failure summary. If the head dies, ssh's stdin closes on every host and each agent stops its
// workers.
#include <string_view>

#include "ddprun/agent/environment.hpp"
#include "launch_config.hpp"

namespace ddprun::launcher {

// Runs the job; returns ddprun's exit status (launch_config.hpp). Blocks until every host is done.
int run_head_node(const LaunchConfig& c, const agent::Environment& env);

// An agent started with --head_control prints its failure summary between these lines, so that
// the head prints one copy, not one per host.
constexpr std::string_view kSummaryBegin = "--- ddprun failure summary ---";
constexpr std::string_view kSummaryEnd = "--- end of ddprun failure summary ---";
// The first line a host prints once ssh reached it and ddprun is there; the head launches and
// checks in one ssh session per host.
constexpr std::string_view kReadyMarker = "--- ddprun host ready ---";

}  // namespace ddprun::launcher
