#include "agent_config.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "command_line_parts.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/agent/temp_folder.hpp"
#include "ddprun/store/local_address.hpp"
#include "option_values.hpp"
#include "python_interpreter.hpp"
#include "python_number.hpp"

namespace ddprun::launcher {
namespace {

// torchrun names a Python job after its script (the first argument that is not an option).
std::string entrypoint_name(const LaunchConfig& c) { return c.training_script; }

// The node check's probe: ddprun-node-probe in ddprun's own folder, as the build and the Debian
// package put it; "" where this installation has none (the wheel).
std::string node_probe_path() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string probe = (self.parent_path() / "ddprun-node-probe").string();
  return !ec && ::access(probe.c_str(), X_OK) == 0 ? probe : std::string();
}

// The workers' command: the script under the chosen interpreter (or the program itself with
// --no_python), torch.distributed.launch's --local-rank argument, the script's arguments.
void set_entrypoint(const LaunchConfig& c, const agent::Environment& env, agent::AgentConfig& a) {
  if (c.no_python && !c.run_path) {
    a.entrypoint.push_back(c.training_script);
  } else {
    a.entrypoint = {choose_python(env).program, "-u"};
    a.python_workers = true;
    if (c.module && !c.run_path) a.entrypoint.push_back("-m");  // --run-path runs a path
    a.entrypoint.push_back(c.training_script);
  }
  // torch.distributed.launch's argument, through torchrun's ${local_rank} macro.
  if (!c.local_rank_argument.empty())
    a.entrypoint.push_back(c.local_rank_argument + "=${local_rank}");
  a.entrypoint.insert(a.entrypoint.end(), c.training_script_args.begin(),
                      c.training_script_args.end());
  a.entrypoint_name = entrypoint_name(c);
}

// The settings the agent takes as the command line gave them.
void copy_settings(const LaunchConfig& c, agent::AgentConfig& a) {
  a.role = c.role;
  a.log_dir = c.log_dir;
  a.redirects = c.redirects;
  a.tee = c.tee;
  a.console_ranks = c.console_ranks;
  a.log_line_prefix_template = c.log_line_prefix_template;
  a.duplicate_stdout_filters = c.duplicate_stdout_filters;
  a.duplicate_stderr_filters = c.duplicate_stderr_filters;
  a.numa_binding = c.numa_binding;
  a.events_to_console = c.event_log_handler == EventLogHandler::kConsole;
  a.signals = c.signals;
  a.shutdown_timeout = c.shutdown_timeout;
  a.virtual_local_rank = c.virtual_local_rank;
  a.placement = c.placement;
  a.event_log = c.event_log;
  a.metrics_port = c.metrics_port;
  a.metrics_addr = c.metrics_addr;
  a.hang = c.hang;
  a.checkpoint_memory_limit = c.checkpoint_memory_limit;
  a.checkpoint_peer_copies = c.checkpoint_peer_copies;
  a.checkpoint_dir = c.checkpoint_dir;
  a.checkpoint_persist_every = c.checkpoint_persist_every;
  a.crash_loop_attempts = static_cast<int>(c.crash_loop_attempts);
  a.restart_mode = c.restart_mode;
  a.standby_workers = static_cast<int>(c.standby_workers);
  a.health_check = c.health_check;
  a.health_check_timeout = c.health_check_timeout;
  a.node_check = c.node_check;
  a.node_check_factor = c.node_check_factor;
  a.node_check_timeout = c.node_check_timeout;
  a.straggler = c.straggler;
  a.rdzv = c.rdzv;
}

// The programs the checks need (gdb for native workers' stacks, the node check's probe) and
// --preload, which only Python workers take.
void add_helpers(const LaunchConfig& c, const agent::Environment& env, agent::AgentConfig& a) {
  if (a.hang.mode != agent::HangPolicy::Mode::kOff && !a.python_workers) {
    // Native workers' stacks on a hang: gdb, where it is on PATH.
    const std::string gdb = resolved_program("gdb", env);
    if (gdb.find('/') != std::string::npos && ::access(gdb.c_str(), X_OK) == 0) {
      a.native_debugger = gdb;
    }
  }
  // --node_check needs the probe; the straggler check uses it where there is one (a slow link).
  if (a.node_check || a.straggler.watched()) a.node_probe = node_probe_path();
  if (a.node_check && a.node_probe.empty()) {
    throw UsageError(
        "--node_check needs the probe program ddprun-node-probe beside ddprun, which this "
        "installation lacks (the Debian package and a build from source have it; the wheel does "
        "not)");
  }
  if (a.python_workers) {
    a.preload = c.preload;
  } else if (!c.preload.modules.empty()) {
    spdlog::warn("--preload is ignored with --no_python: the workers are not Python");
  }
}

// The workers' environment as torchrun sets it (the signals, OMP_NUM_THREADS with its notice,
// the file timer's path), and what torch's variables ask of the agent.
void set_worker_environment(const LaunchConfig& c, agent::Environment env, agent::AgentConfig& a,
                            std::string* notice) {
  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = c.signals_to_handle;
  if (!env.contains("OMP_NUM_THREADS") && c.rdzv.nproc > 1) {
    env["OMP_NUM_THREADS"] = "1";
    if (notice != nullptr) {
      *notice =
          "*****************************************\n"
          "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
          "avoid your system being overloaded, please further tune the variable for optimal "
          "performance in your application as needed. \n"
          "*****************************************\n";
    }
  }
  // torchrun's watchdog: with TORCHELASTIC_ENABLE_FILE_TIMER=1 the agent serves torch's expiration
  // timers at TORCHELASTIC_TIMER_FILE, or at a fresh path in the temporary folder that every worker
  // is given.
  if (auto it = env.find("TORCHELASTIC_ENABLE_FILE_TIMER"); it != env.end() && it->second == "1") {
    if (env["TORCHELASTIC_TIMER_FILE"].empty()) {
      try {
        env["TORCHELASTIC_TIMER_FILE"] =
            (agent::temp_folder(env) / ("watchdog_timer_" + random_run_id())).string();
      } catch (const std::runtime_error& e) {
        throw RefusedValue(fmt::format("TORCHELASTIC_ENABLE_FILE_TIMER=1: {}", e.what()));
      }
    }
    a.timer_file = env["TORCHELASTIC_TIMER_FILE"];
  }
  // torch 2.13's TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT: seconds; unset, non-positive or not a
  // number turns the watch off, as in torch, which reads it with float() (python_number.hpp:
  // "30\n" from a file is 30, "1_0" is 10, a hexadecimal number is no number; "inf" and "nan"
  // never fire there, as off here).
  if (auto it = env.find("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT"); it != env.end()) {
    const std::optional<double> s = python_float(it->second);
    if (s && *s > 0 && std::isfinite(*s)) {
      // (At most a year: a larger number is a watch that never fires, and no overflow.)
      a.uninterruptible_timeout =
          std::chrono::milliseconds(static_cast<long long>(std::min(*s, 365.0 * 86400) * 1000));
    }
  }
  env.erase(kInstalledInterpreterVariable);
  a.env = std::move(env);
}

}  // namespace

std::vector<std::string> idle_options(const LaunchConfig& c) {
  std::vector<std::string> out;
  const auto given = [&](const char* dest) { return c.given.contains(dest); };
  const auto without = [&](const char* dest, bool missing, const char* needs) {
    if (given(dest) && missing)
      out.push_back(fmt::format("--{} has no effect without {}", dest, needs));
  };
  without("health_check_timeout", c.health_check.empty(), "--health_check");
  without("node_check_factor", !c.node_check, "--node_check");
  without("node_check_timeout", !c.node_check, "--node_check");
  without("checkpoint_persist_every", c.checkpoint_dir.empty(), "--checkpoint_dir");
  without("metrics_addr", !c.metrics_port, "--metrics_port");
  for (const char* dest : {"straggler_steps", "straggler_action"}) {
    without(dest, !c.straggler.watched(), "a --straggler_threshold above 0");
    if (given(dest) && c.straggler.watched() && c.rdzv.max_nodes == 1 && c.hosts.empty()) {
      out.push_back(fmt::format(
          "--{} has no effect in a job of one node: the straggler check compares nodes", dest));
    }
  }
  return out;
}

agent::AgentConfig make_agent_config(const LaunchConfig& c, agent::Environment env,
                                     std::string* notice) {
  for (const std::string& line : idle_options(c)) spdlog::warn("{}", line);
  agent::AgentConfig a;
  set_entrypoint(c, env, a);
  copy_settings(c, a);
  add_helpers(c, env, a);
  set_worker_environment(c, std::move(env), a, notice);
  return a;
}

}  // namespace ddprun::launcher
