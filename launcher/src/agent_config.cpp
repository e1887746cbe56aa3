#include "ddprun/launcher/agent_config.hpp"

#include "ddprun/agent/signals.hpp"

namespace ddprun::launcher {
namespace {

// torchrun names a Python job after its script (the first argument that is not an option).
std::string entrypoint_name(const LaunchConfig& c) { return c.training_script; }

}  // namespace

agent::AgentConfig make_agent_config(const LaunchConfig& c, agent::Environment env,
                                     std::string* notice) {
  agent::AgentConfig a;
  if (c.no_python && !c.run_path) {
    a.entrypoint.push_back(c.training_script);
  } else {
    auto py = env.find("PYTHON_EXEC");
    a.entrypoint = {py != env.end() ? py->second : "python3", "-u"};
    if (c.module) a.entrypoint.push_back("-m");
    a.entrypoint.push_back(c.training_script);
  }
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
  a.signals = agent::parse_signal_list(c.signals_to_handle);
  a.shutdown_timeout = std::chrono::seconds(c.shutdown_timeout.value_or(30));
  a.virtual_local_rank = c.virtual_local_rank;

  if (c.rdzv_backend == "static") {
    a.store_port = c.master_port.value_or(29500);
    a.master_addr = c.master_addr;
    a.num_nodes = c.max_nodes;
    a.node_rank = c.node_rank;
    const auto seconds = [&](const char* key, std::chrono::milliseconds fallback) {
      auto it = c.rdzv_config.find(key);
      return it == c.rdzv_config.end()
                 ? fallback
                 : std::chrono::milliseconds(static_cast<long>(std::stod(it->second) * 1000));
    };
    a.join_timeout = seconds("join_timeout", a.join_timeout);
    a.heartbeat_timeout = seconds("heartbeat_timeout", a.heartbeat_timeout);
  } else {
    // Single-node c10d: the store listens on the endpoint's port; workers reach it on this host.
    a.store_port = c.rdzv_port;
    a.master_addr = c.local_addr.empty() ? "127.0.0.1" : c.local_addr;
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
  a.env = std::move(env);
  return a;
}

}  // namespace ddprun::launcher
