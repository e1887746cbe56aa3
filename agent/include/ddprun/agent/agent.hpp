#pragma once
// The per-node agent: runs rounds of its worker group over the job's rendezvous (one loop for every
// backend), stops the group when the rendezvous interrupts a round, forwards signals, and reports
// the outcome with the cross-node failure summary.
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/agent/environment.hpp"
#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/agent/log_spec.hpp"
#include "ddprun/agent/numa_binding.hpp"
#include "ddprun/agent/preload_spec.hpp"
#include "ddprun/agent/progress_clock.hpp"
#include "ddprun/agent/straggler_policy.hpp"
#include "ddprun/rendezvous/rendezvous_config.hpp"
#include "ddprun/store/metrics_server.hpp"

namespace ddprun::agent {

// Where a scheduler placed this agent's one worker (a per-process launch under srun or mpirun): the
// worker's LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK and GROUP_WORLD_SIZE come from here, not from
// the round. RANK and WORLD_SIZE still come from the round (the rendezvous' node rank is the task's
// rank).
struct Placement {
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
};

// --restart_mode: after a failure every worker starts as a new process (torchrun's way), or the
// failed ranks' processes are replaced and the others run their training again in process.
enum class RestartMode { kProcess, kInProcess };

struct AgentConfig {
  std::vector<std::string> entrypoint;  // the worker command line, identical for every local rank
  std::string entrypoint_name;          // names the job in the failure summary
  std::string role = "default";
  std::string log_dir;  // base folder; empty: a fresh torchelastic_* in temp_folder(env)
  std::vector<Std> redirects;
  std::vector<Std> tee;
  std::optional<std::set<int>> console_ranks;  // nullopt: every local rank
  // The prefix of each teed console line, a Python string.Template over role_name, rank,
  // local_rank and hostname (torchrun's --log-line-prefix-template); empty: "[<role><local
  // rank>]:".
  std::string log_line_prefix_template;
  // Teed console lines containing any of these go to <attempt>/filtered_std{out,err}.log too.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::optional<NumaMode> numa_binding;  // each worker bound to the CPUs near its accelerator
  std::vector<int> signals;              // forwarded to the workers
  std::chrono::milliseconds shutdown_timeout{30'000};
  bool virtual_local_rank = false;
  std::optional<Placement> placement;  // set: nproc is 1, placed by a scheduler
  // A head node's control channel (the read end of an ssh session's stdin), or -1. Each line names
  // a signal ("SIGINT") the head received: the agent acts as if it had received it. End of file
  // means the head is gone: the agent acts as on SIGTERM. The agent takes ownership.
  int control_fd = -1;
  std::string
      event_log;  // --event_log: a file for one JSON line per event (event_log.hpp); "" none
  std::optional<int> metrics_port;  // --metrics_port: Prometheus text at GET /metrics; 0 any port
  std::string metrics_addr = store::kDefaultMetricsAddress;  // --metrics_addr
  bool events_to_console = false;  // --event_log_handler=console: each event as a line on stderr
  // Run with /bin/sh before this node joins each round (bounded_command.hpp); "" none.
  std::string health_check;
  std::chrono::milliseconds health_check_timeout{60'000};
  // --node_check: the probe measures every node of a round with a node not checked before, and a
  // node slower than node_check_factor times the median, or silent past node_check_timeout, stays
  // out. node_probe: the probe program (ddprun-node-probe beside ddprun); "" none installed.
  bool node_check = false;
  double node_check_factor = 2.0;
  std::chrono::milliseconds node_check_timeout{30'000};
  std::string node_probe;
  // A node that holds the steps back while the job trains (jobs of more than one node).
  StragglerPolicy straggler;
  HangPolicy hang;              // --hang_timeout (progress_clock.hpp)
  bool python_workers = false;  // the entrypoint is a Python interpreter (stacks on a hang)
  // --preload: Python workers start from a warm interpreter (warm_interpreter.hpp); no modules:
  // every worker starts cold. The entrypoint is then {python, -u, [-m], script, args...}.
  PreloadSpec preload;
  // gdb, where it is installed: native workers' stacks on a hang (worker_group.hpp); "" none.
  std::string native_debugger;
  // A worker in uninterruptible sleep this long makes the node leave the job (worker_group.hpp);
  // zero: not watched.
  std::chrono::milliseconds uninterruptible_timeout{0};
  // The FIFO where workers' torch expiration timers are served (file_timer.hpp); "" none.
  std::string timer_file;
  // The job's rendezvous, complete: backend, nodes, endpoint, timeouts, and the job's run id, this
  // node's workers (nproc) and the restarts allowed (max_restarts), which the agent reads here.
  rendezvous::RendezvousConfig rdzv;
  Environment env;  // the environment workers inherit
  // --checkpoint_memory_limit: bytes the node's in-memory checkpoints may hold (none: no bound).
  std::optional<uint64_t> checkpoint_memory_limit;
  // Whether, in a job of several nodes, each node's checkpoints are copied to its peer node
  // (false: --no_checkpoint_peer_copies).
  bool checkpoint_peer_copies = true;
  // --checkpoint_dir: where complete checkpoints are persisted in the background ("" nowhere), and
  // --checkpoint_persist_every: the span of steps of which the first is persisted.
  std::string checkpoint_dir;
  int64_t checkpoint_persist_every = 100;
  // --crash_loop_attempts: attempts failing the same way in a row that end the job (0: never).
  int crash_loop_attempts = 3;
  // --restart_mode: how workers restart after a failure (worker_group.hpp, restart_in_process).
  RestartMode restart_mode = RestartMode::kProcess;
  // --standby_workers: with kInProcess, standby processes per node that take failed workers'
  // places (worker_group.hpp, keep_standbys).
  int standby_workers = 0;
};

// How a run ended, mapped by the launcher to its exit status.
struct AgentOutcome {
  // kUnhealthy: the health check failed; the node did not join the job, or left it.
  enum class State { kSucceeded, kFailed, kSignaled, kLaunchError, kUnhealthy };
  State state = State::kSucceeded;
  int signal = 0;           // kSignaled
  std::string summary;      // kFailed: the failure summary; kLaunchError, kUnhealthy: the reason
  std::string run_log_dir;  // <log_dir>/<run_id>_<rand>
  // kFailed: this node's first worker to fail in the last round (the earliest), when one of its
  // own did.
  std::optional<WorkerFailure> own_failure;
  // kFailed: the job stopped in a crash loop (--crash_loop_attempts), restarts left or not.
  bool crash_loop = false;
};

// Runs the job to its end on the calling thread. Logs to spdlog's default logger.
AgentOutcome run_agent(const AgentConfig& config);

}  // namespace ddprun::agent
