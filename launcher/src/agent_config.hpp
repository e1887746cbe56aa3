#pragma once
// Turns a validated LaunchConfig into what the agent runs.
#include "ddprun/agent/agent.hpp"
#include "launch_config.hpp"

namespace ddprun::launcher {

// `env` is the launcher's environment; when OMP_NUM_THREADS is unset and more than one worker runs,
// it is set to 1 for the workers and `notice` receives torchrun's banner.
agent::AgentConfig make_agent_config(const LaunchConfig& c, agent::Environment env,
                                     std::string* notice);

// One line for each option given (on the command line or by PET_*) that does nothing without
// another, or in this job: the agent warns of each as it starts, rather than ignore it silently.
std::vector<std::string> idle_options(const LaunchConfig& c);

}  // namespace ddprun::launcher
