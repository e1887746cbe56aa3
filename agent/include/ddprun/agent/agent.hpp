#pragma once
// The per-node agent for a single-node job: hosts the store in-process, runs the worker group,
// restarts it on failure while the budget lasts, forwards signals, and reports the outcome.
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/agent/environment.hpp"
#include "ddprun/agent/log_spec.hpp"

namespace ddprun::agent {

struct AgentConfig {
  std::vector<std::string> entrypoint;  // the worker command line, identical for every local rank
  std::string entrypoint_name;          // names the job in the failure summary
  int nproc = 1;
  std::string role = "default";
  int max_restarts = 0;
  std::string run_id = "none";
  std::string log_dir;  // base folder; empty: a fresh /tmp/torchelastic_* folder
  std::vector<Std> redirects;
  std::vector<Std> tee;
  std::optional<std::set<int>> console_ranks;  // nullopt: every local rank
  std::vector<int> signals;                    // forwarded to the workers
  std::chrono::milliseconds shutdown_timeout{30'000};
  bool virtual_local_rank = false;
  std::string store_host;                 // bind address of the store; empty: every address
  int store_port = 0;                     // 0: the OS picks
  std::string master_addr = "127.0.0.1";  // what workers are told
  // Multi-node (static backend): node 0's agent hosts the store at master_addr:store_port, the
  // others connect to it (see node_coordinator.hpp).
  int num_nodes = 1;
  int node_rank = 0;
  std::chrono::milliseconds join_timeout{600'000};
  std::chrono::milliseconds heartbeat_timeout{5'000};
  std::chrono::milliseconds exit_barrier_timeout{300'000};
  // Elastic (c10d, min_nodes < max_nodes or a c10d endpoint with max_nodes > 1): the store at
  // rdzv_host:rdzv_port, hosted by this agent when host_store says so (see
  // elastic_coordinator.hpp).
  bool elastic = false;
  int min_nodes = 1;
  int max_nodes = 1;
  std::string rdzv_host;
  int rdzv_port = 29400;
  enum class HostStore { kNo, kYes, kIfFree } host_store = HostStore::kNo;
  std::chrono::milliseconds last_call_timeout{30'000};
  std::string local_addr;  // advertised for this node's per-round worker store; empty: IP-first
  Environment env;         // the environment workers inherit
};

// How a run ended, mapped by the launcher to its exit status.
struct AgentOutcome {
  enum class State { kSucceeded, kFailed, kSignaled, kLaunchError };
  State state = State::kSucceeded;
  int signal = 0;           // kSignaled
  std::string summary;      // kFailed: the failure summary; kLaunchError: the reason
  std::string run_log_dir;  // <log_dir>/<run_id>_<rand>
};

// Runs the job to its end on the calling thread. Logs to spdlog's default logger.
AgentOutcome run_agent(const AgentConfig& config);

}  // namespace ddprun::agent
