// ddprun: the torchrun-compatible launcher. Exit statuses: see cli_help().
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "agent_config.hpp"
#include "ddprun/agent/agent.hpp"
#include "ddprun/agent/console.hpp"
#include "ddprun/store/process_setup.hpp"
#include "ddprun/store/version.hpp"
#include "head_node.hpp"
#include "launch_config.hpp"
#include "launcher_error_file.hpp"
#include "log_level.hpp"
#include "python_interpreter.hpp"
#include "status_command.hpp"
#include "timeline_command.hpp"
#include "token_command.hpp"

using namespace ddprun;

namespace {

// What the failure summary needs to say which interpreter ran Python workers, if they could not
// import what the script imports.
struct PythonWorkers {
  launcher::PythonInterpreter python;
  std::string script;
  bool module = false;
  agent::Environment env;

  std::string hint() const {
    const auto missing =
        launcher::missing_imports(python.program, script, module, env, std::chrono::seconds(10));
    return launcher::interpreter_hint(python, launcher::resolved_program(python.program, env),
                                      missing, script);
  }
};

// A node's run of the job: the agent's configuration and what the launcher says around it.
struct NodeRun {
  agent::AgentConfig config;
  bool head_control = false;  // started by a head node, which controls it through stdin
  bool per_process = false;   // started per process (srun, mpirun): one worker, its own status
  std::string error_file;     // the launcher's own TORCHELASTIC_ERROR_FILE ("": none)
  std::optional<PythonWorkers> python_workers;  // for the failure summary's hint, if any
};

void set_log_level(const agent::Environment& env) {
  const auto level = env.find("LOGLEVEL");
  if (level == env.end()) return;
  if (const auto threshold = launcher::parse_log_level(level->second)) {
    spdlog::set_level(*threshold);
  } else {
    spdlog::warn("LOGLEVEL={} is not a log level (DEBUG, INFO, WARNING, ERROR, CRITICAL); ignored",
                 level->second);
  }
}

// `ddprun status|token|timeline ...`: its exit status; nullopt for a launch.
std::optional<int> run_subcommand(const std::vector<std::string>& args,
                                  const agent::Environment& env) {
  if (args.empty()) return std::nullopt;
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args.front() == "status") return launcher::run_status(rest, env);
  if (args.front() == "token") return launcher::run_token(rest);
  if (args.front() == "timeline") return launcher::run_timeline(rest);
  return std::nullopt;
}

// The command line of a launch, parsed: this node's run, or the exit status where the launcher
// ends here (help, version, a usage error, a head node's whole job).
std::variant<NodeRun, int> prepare(const std::vector<std::string>& args,
                                   const agent::Environment& env) {
  // torch.distributed.launch's command line (deprecated there, as here: a notice, not an error).
  const bool launch_dialect = !args.empty() && args.front() == "launch";
  if (launch_dialect) {
    std::cerr << "ddprun launch: torch.distributed.launch is deprecated; use ddprun as torchrun "
                 "(LOCAL_RANK is in every worker's environment)\n";
  }
  NodeRun run;
  if (const auto file = env.find("TORCHELASTIC_ERROR_FILE"); file != env.end()) {
    run.error_file = file->second;
  }
  try {
    const launcher::LaunchConfig launch =
        launch_dialect ? launcher::parse_command_line({args.begin() + 1, args.end()}, env,
                                                      launcher::Dialect::kDistributedLaunch)
                       : launcher::parse_command_line(args, env);
    if (!launch.scheduler_notice.empty()) spdlog::info("{}", launch.scheduler_notice);
    if (!launch.hosts.empty()) {
      store::prepare_server_process();
      try {
        return launcher::run_head_node(launch, env);
      } catch (const std::exception& e) {  // the machine refused a pipe or a process
        std::cerr << "ddprun: error: " << e.what() << std::endl;
        return launcher::kExitLaunchError;
      }
    }
    std::string notice;
    run.config = launcher::make_agent_config(launch, env, &notice);
    run.head_control = launch.head_control;
    run.per_process = launch.placement.has_value();
    // Said once per node; per process, by the first rank only.
    if (!(launch.no_python && !launch.run_path) &&
        !(run.per_process &&
          (launch.placement->node_rank != 0 || launch.placement->local_rank != 0))) {
      run.python_workers = PythonWorkers{launcher::choose_python(env), launch.training_script,
                                         launch.module, run.config.env};
    }
    if (!run.head_control) std::cerr << notice << std::flush;  // not once per host of a head
  } catch (const launcher::HelpRequested&) {
    std::cout << launcher::cli_help();
    return launcher::kExitSuccess;
  } catch (const launcher::VersionRequested&) {
    std::cout << store::version_text("ddprun") << "\n";
    return launcher::kExitSuccess;
  } catch (const launcher::CompletionRequested& c) {
    std::cout << c.script;
    return launcher::kExitSuccess;
  } catch (const launcher::RefusedValue& e) {
    std::cerr << "ddprun: error: " << e.what() << std::endl;
    if (!run.error_file.empty()) launcher::write_refused_value(run.error_file, e.what());
    return launcher::kExitWorkerFailure;
  } catch (const launcher::UsageError& e) {
    std::cerr << "ddprun: error: " << e.what() << std::endl;
    return launcher::kExitUsage;
  }
  return run;
}

// Under a head node, stdin is its control channel: the agent reads it, and the workers get
// /dev/null so that none of them reads the head's lines.
void take_control_channel(agent::AgentConfig& config) {
  config.control_fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  const int null = ::open("/dev/null", O_RDONLY);
  if (null >= 0) {
    ::dup2(null, STDIN_FILENO);
    ::close(null);
  }
}

// What the node's run ended with, said, and its exit status.
int exit_status(const agent::AgentOutcome& outcome, const NodeRun& run) {
  switch (outcome.state) {
    case agent::AgentOutcome::State::kSucceeded:
      return launcher::kExitSuccess;
    case agent::AgentOutcome::State::kFailed: {
      const std::string summary =
          outcome.summary + (run.python_workers ? run.python_workers->hint() : std::string());
      if (run.head_control) {
        std::cerr << launcher::kSummaryBegin << "\n"
                  << summary << launcher::kSummaryEnd << std::endl;
      } else {
        std::cerr << summary << std::flush;
      }
      if (outcome.crash_loop) return launcher::kExitCrashLoop;  // for the scheduler: no requeue
      // Started per process by srun or mpirun, ddprun is its one worker to the scheduler: the
      // worker's own status, as the scheduler would have seen it without ddprun.
      if (run.per_process && outcome.own_failure) {
        const int code = outcome.own_failure->exitcode;
        return code > 0 ? code : 128 - code;
      }
      return launcher::kExitWorkerFailure;
    }
    case agent::AgentOutcome::State::kSignaled:
      return 128 + outcome.signal;
    case agent::AgentOutcome::State::kUnhealthy:
      std::cerr << "ddprun: this node is kept out of the job: " << outcome.summary << std::endl;
      return launcher::kExitUnhealthy;
    case agent::AgentOutcome::State::kLaunchError:
      std::cerr << "ddprun: error: " << outcome.summary << std::endl;
      return launcher::kExitLaunchError;
  }
  return launcher::kExitLaunchError;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "ddprun", std::make_shared<agent::ConsoleSink>(STDERR_FILENO)));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ddprun] [%l] %v");
  const std::vector<std::string> args(argv + 1, argv + argc);
  const agent::Environment env = agent::current_environment();
  set_log_level(env);
  if (const std::optional<int> status = run_subcommand(args, env)) return *status;
  std::variant<NodeRun, int> prepared = prepare(args, env);
  if (const int* status = std::get_if<int>(&prepared)) return *status;
  NodeRun& run = std::get<NodeRun>(prepared);
  store::prepare_server_process();
  if (run.head_control) take_control_channel(run.config);
  const agent::AgentOutcome outcome = agent::run_agent(run.config);
  if (!run.error_file.empty()) launcher::write_launcher_error_file(run.error_file, outcome);
  return exit_status(outcome, run);
}
