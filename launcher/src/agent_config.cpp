#include "agent_config.hpp"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "command_line_parts.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/store/local_address.hpp"
#include "option_values.hpp"
#include "python_interpreter.hpp"

namespace ddprun::launcher {
namespace {

// torchrun names a Python job after its script (the first argument that is not an option).
std::string entrypoint_name(const LaunchConfig& c) { return c.training_script; }

bool is_this_host(const std::string& host) {
  return host == "localhost" || host.starts_with("127.") || host == "::1" ||
         host == store::host_name();
}

// rdzv_conf durations are seconds (fractions allowed); parse_command_line checked every value.
std::chrono::milliseconds seconds_or(const LaunchConfig& c, const char* key,
                                     std::chrono::milliseconds fallback) {
  auto it = c.rdzv_config.find(key);
  return it == c.rdzv_config.end() ? fallback : parse_seconds(it->second, key);
}

// How long a silent node stays a member: heartbeat_timeout, else torchrun's older pair
// keep_alive_interval x keep_alive_max_attempt, else 5 s.
std::chrono::milliseconds heartbeat_timeout(const LaunchConfig& c) {
  if (c.rdzv_config.contains("heartbeat_timeout")) {
    return seconds_or(c, "heartbeat_timeout", std::chrono::seconds(5));
  }
  if (c.rdzv_config.contains("keep_alive_interval") ||
      c.rdzv_config.contains("keep_alive_max_attempt")) {
    const auto interval = seconds_or(c, "keep_alive_interval", std::chrono::seconds(5));
    auto it = c.rdzv_config.find("keep_alive_max_attempt");
    const long attempts = it == c.rdzv_config.end() ? 3 : parse_integer(it->second, it->first);
    return interval * std::max(1L, attempts);
  }
  return std::chrono::seconds(5);
}

}  // namespace

agent::AgentConfig make_agent_config(const LaunchConfig& c, agent::Environment env,
                                     std::string* notice) {
  agent::AgentConfig a;
  if (c.no_python && !c.run_path) {
    a.entrypoint.push_back(c.training_script);
  } else {
    a.entrypoint = {choose_python(env).program, "-u"};
    a.python_workers = true;
    if (c.module) a.entrypoint.push_back("-m");
    a.entrypoint.push_back(c.training_script);
  }
  // torch.distributed.launch's argument, through torchrun's ${local_rank} macro.
  if (!c.local_rank_argument.empty())
    a.entrypoint.push_back(c.local_rank_argument + "=${local_rank}");
  a.entrypoint.insert(a.entrypoint.end(), c.training_script_args.begin(),
                      c.training_script_args.end());
  a.entrypoint_name = entrypoint_name(c);
  a.nproc = c.nproc;
  a.role = c.role;
  a.max_restarts = c.max_restarts;
  a.run_id = c.rdzv_id;
  a.log_dir = c.log_dir;
  a.redirects = agent::parse_std_spec(c.redirects, c.nproc);
  a.tee = agent::parse_std_spec(c.tee, c.nproc);
  a.console_ranks = agent::parse_rank_filter(c.local_ranks_filter);
  a.log_line_prefix_template = c.log_line_prefix_template;
  a.duplicate_stdout_filters = c.duplicate_stdout_filters;
  a.duplicate_stderr_filters = c.duplicate_stderr_filters;
  a.numa_binding = c.numa_binding;
  a.events_to_console = c.event_log_handler == EventLogHandler::kConsole;
  a.signals = agent::parse_signal_list(c.signals_to_handle);
  a.shutdown_timeout = std::chrono::seconds(c.shutdown_timeout.value_or(30));
  a.virtual_local_rank = c.virtual_local_rank;
  a.placement = c.placement;
  a.event_log = c.event_log;
  a.metrics_port = c.metrics_port;
  a.hang = c.hang;
  if (a.hang.mode != agent::HangPolicy::Mode::kOff && !a.python_workers) {
    // Native workers' stacks on a hang: gdb, where it is on PATH.
    const std::string gdb = resolved_program("gdb", env);
    if (gdb.find('/') != std::string::npos && ::access(gdb.c_str(), X_OK) == 0) {
      a.native_debugger = gdb;
    }
  }
  a.health_check = c.health_check;
  a.health_check_timeout = c.health_check_timeout;
  if (a.python_workers) {
    a.preload = c.preload;
  } else if (!c.preload.modules.empty()) {
    spdlog::warn("--preload is ignored with --no_python: the workers are not Python");
  }

  rendezvous::RendezvousConfig& r = a.rdzv;
  r.backend = c.backend;
  r.min_nodes = c.min_nodes;
  r.max_nodes = c.max_nodes;
  r.join_timeout = seconds_or(c, "join_timeout", r.join_timeout);
  r.heartbeat_timeout = heartbeat_timeout(c);
  if (c.backend == rendezvous::Backend::kStatic) {
    // Node 0 hosts the store on every address; workers and the other nodes reach it at
    // master_addr.
    r.store_port = c.master_port.value_or(29500);
    r.master_addr = c.master_addr;
    r.endpoint_host = c.master_addr;
    r.node_rank = c.node_rank;
  } else if (c.max_nodes > 1) {
    r.etcd_endpoints = c.etcd_endpoints;
    r.etcd_tls = c.etcd_tls;
    if (auto it = c.rdzv_config.find("etcd_prefix"); it != c.rdzv_config.end()) {
      r.etcd_prefix = it->second.ends_with("/") ? it->second : it->second + "/";
    }
    r.endpoint_host = c.rdzv_host;
    r.endpoint_port = c.rdzv_port;
    r.local_addr = c.local_addr;
    r.last_call_timeout = seconds_or(c, "last_call_timeout", r.last_call_timeout);
    r.reconnect_timeout = seconds_or(c, "reconnect_timeout", r.reconnect_timeout);
    if (auto it = c.rdzv_config.find("is_host"); it != c.rdzv_config.end()) {
      r.host_store = parse_bool(it->second, "--rdzv_conf is_host")
                         ? rendezvous::RendezvousConfig::HostStore::kYes
                         : rendezvous::RendezvousConfig::HostStore::kNo;
    } else if (c.backend == rendezvous::Backend::kC10d && is_this_host(c.rdzv_host)) {
      // torchrun's heuristic: an endpoint naming this machine is hosted by one of its agents (the
      // first to bind); a standalone ddprund there holds the port already and is used instead.
      r.host_store = rendezvous::RendezvousConfig::HostStore::kIfFree;
    }
  } else {
    // Single-node c10d: the store listens on the endpoint's port; workers reach it on this host.
    r.store_port = c.rdzv_port;
    r.master_addr = c.local_addr.empty() ? "127.0.0.1" : c.local_addr;
  }

  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = c.signals_to_handle;
  if (!env.contains("OMP_NUM_THREADS") && c.nproc > 1) {
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
    auto& path = env["TORCHELASTIC_TIMER_FILE"];
    if (path.empty()) {
      auto tmp = env.find("TMPDIR");
      path = fmt::format("{}/watchdog_timer_{}",
                         tmp == env.end() || tmp->second.empty() ? "/tmp" : tmp->second,
                         random_run_id());
    }
    a.timer_file = path;
  }
  // torch 2.13's TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT: seconds; unset, non-positive or not a
  // number turns the watch off, as in torch.
  if (auto it = env.find("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT"); it != env.end()) {
    char* end = nullptr;
    const double s = std::strtod(it->second.c_str(), &end);
    if (end != it->second.c_str() && *end == '\0' && s > 0 && std::isfinite(s)) {
      a.uninterruptible_timeout = std::chrono::milliseconds(static_cast<long long>(s * 1000));
    }
  }
  env.erase(kInstalledInterpreterVariable);
  a.env = std::move(env);
  return a;
}

}  // namespace ddprun::launcher
