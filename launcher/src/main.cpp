// ddprun: the torchrun-compatible launcher. Exit statuses: see cli_help().
#include <cstdio>
#include <iostream>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "ddprun/agent/agent.hpp"
#include "ddprun/agent/console.hpp"
#include "ddprun/launcher/agent_config.hpp"
#include "ddprun/launcher/launch_config.hpp"
#include "ddprun/rendezvous/process_setup.hpp"

using namespace ddprun;

int main(int argc, char** argv) {
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "ddprun", std::make_shared<agent::ConsoleSink>(STDERR_FILENO)));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ddprun] [%l] %v");
  const std::vector<std::string> args(argv + 1, argv + argc);

  agent::AgentConfig config;
  try {
    const launcher::LaunchConfig launch =
        launcher::parse_command_line(args, agent::current_environment());
    std::string notice;
    config = launcher::make_agent_config(launch, agent::current_environment(), &notice);
    std::cerr << notice << std::flush;
  } catch (const launcher::HelpRequested&) {
    std::cout << launcher::cli_help();
    return launcher::kExitSuccess;
  } catch (const launcher::UsageError& e) {
    std::cerr << "ddprun: error: " << e.what() << std::endl;
    return launcher::kExitUsage;
  }

  rendezvous::prepare_server_process();
  const agent::AgentOutcome outcome = agent::run_agent(config);
  switch (outcome.state) {
    case agent::AgentOutcome::State::kSucceeded:
      return launcher::kExitSuccess;
    case agent::AgentOutcome::State::kFailed:
      std::cerr << outcome.summary << std::flush;
      return launcher::kExitWorkerFailure;
    case agent::AgentOutcome::State::kSignaled:
      return 128 + outcome.signal;
    case agent::AgentOutcome::State::kLaunchError:
      std::cerr << "ddprun: error: " << outcome.summary << std::endl;
      return launcher::kExitLaunchError;
  }
  return launcher::kExitLaunchError;
}
