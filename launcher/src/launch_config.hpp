#pragma once
// Everything `ddprun` was asked to do, parsed and validated from its command line and the PET_*
// environment fallbacks (the command line wins), with torchrun's names and defaults.
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddprun/agent/agent.hpp"
#include "ddprun/agent/environment.hpp"
#include "ddprun/agent/log_spec.hpp"
#include "ddprun/rendezvous/rendezvous_config.hpp"
#include "hostfile.hpp"

namespace ddprun::launcher {

// A malformed or unsupported command line. The CLI prints it as one line and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value the command line's grammar takes but torchrun refuses once it builds the launch from it:
// --nnodes other than N or MIN:MAX, an --nproc_per_node that is no count (gpu without a GPU), a
// static --rdzv_endpoint without a port, --no-python with --module (or, for `ddprun launch`,
// without --use-env). torchrun fails there with an exception, exit status 1;
// the CLI prints it as one line and exits 1 too.
class RefusedValue : public UsageError {
 public:
  using UsageError::UsageError;
};

// -h/--help was given; the CLI prints cli_help() and exits 0.
struct HelpRequested {};

// --version was given; the CLI prints store::version_text("ddprun") and exits 0.
struct VersionRequested {};

// --print-completion SHELL was given; the CLI prints `script` and exits 0.
struct CompletionRequested {
  std::string script;
};

// Whose command line is parsed: torchrun's (`ddprun ...`) or torch.distributed.launch's
// (`ddprun launch ...`: --use-env, and without it a --local-rank=N argument for the script).
enum class Dialect { kTorchrun, kDistributedLaunch };

// --event_log_handler: torch's registered handlers. kConsole writes each event to stderr;
// kDynamicRendezvous (torch's rendezvous events, dropped by default) and kNull write none.
enum class EventLogHandler { kNull, kConsole, kDynamicRendezvous };

struct LaunchConfig {
  // The job's rendezvous, complete: backend, nodes, this node's workers (nproc, resolved from
  // --nproc_per_node), restarts, run id, endpoints, timeouts (rendezvous_options.hpp).
  rendezvous::RendezvousConfig rdzv;
  std::string nproc_per_node =
      "1";  // as given: an integer, auto, cpu or gpu (each host resolves it)
  bool standalone = false;
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string log_dir;                         // empty: a fresh torchelastic_* (temp_folder)
  std::vector<agent::Std> redirects;           // one per local rank
  std::vector<agent::Std> tee;                 // one per local rank
  std::optional<std::set<int>> console_ranks;  // --local_ranks_filter; nullopt: every local rank
  std::string log_line_prefix_template;  // --log_line_prefix_template, else the variable, else ""
  std::vector<std::string> duplicate_stdout_filters;  // split at ',' (",," is a comma)
  std::vector<std::string> duplicate_stderr_filters;
  std::optional<agent::NumaMode> numa_binding;
  EventLogHandler event_log_handler = EventLogHandler::kNull;
  // ddprun launch without --use-env: the script's local-rank argument, "--local-rank" (torch 2.x)
  // or "--local_rank" (--legacy_local_rank, torch 1.x), given "=N" before the script's own.
  std::string local_rank_argument;
  std::vector<int> signals;  // --signals_to_handle: forwarded to the workers
  // --shutdown_timeout, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s.
  std::chrono::seconds shutdown_timeout{30};
  bool virtual_local_rank = false;
  std::string training_script;
  std::vector<std::string> training_script_args;
  std::string event_log;                                     // --event_log FILE
  std::optional<int> metrics_port;                           // --metrics_port
  std::string metrics_addr = store::kDefaultMetricsAddress;  // --metrics_addr, a valid address
  agent::HangPolicy hang;                                    // --hang_timeout SECONDS|auto
  std::optional<uint64_t> checkpoint_memory_limit;           // --checkpoint_memory_limit
  bool checkpoint_peer_copies = true;                        // not --no_checkpoint_peer_copies
  std::string checkpoint_dir;                                // --checkpoint_dir: absolute; "" none
  int64_t checkpoint_persist_every = 100;                    // --checkpoint_persist_every
  int64_t crash_loop_attempts = 3;                           // --crash_loop_attempts
  agent::RestartMode restart_mode = agent::RestartMode::kProcess;  // --restart_mode
  int64_t standby_workers = 0;                                     // --standby_workers
  std::string health_check;                              // --health_check: a shell command; "" none
  bool node_check = false;                               // --node_check
  double node_check_factor = 2.0;                        // --node_check_factor
  std::chrono::milliseconds node_check_timeout{30'000};  // --node_check_timeout
  agent::StragglerPolicy straggler;  // --straggler_threshold, --straggler_steps, --straggler_action
  std::chrono::milliseconds health_check_timeout{60'000};  // --health_check_timeout
  agent::PreloadSpec preload;                              // --preload MODULE,...|auto

  // A head-node launch (--hostfile or -H): one agent per host, started over ssh, node ranks in
  // the hosts' order. Empty: this process is the node's agent.
  std::vector<HostSlots> hosts;
  int ssh_port = 0;  // 0: ssh's own default
  std::string ssh_identity;
  std::vector<std::string> ssh_options;  // each passed as ssh -o OPTION
  std::vector<std::string> env_vars;     // --env VAR[=VALUE], for every host's agent
  bool head_control = false;  // this agent was started by a head: stdin is its control channel

  // Placement read from Slurm or Open MPI (off with --no_slurm); explicit options win over it.
  bool no_slurm = false;
  std::optional<agent::Placement> placement;  // a per-process launch: one worker, placed
  std::string scheduler_notice;               // one line saying what was taken from where

  std::set<std::string> given;  // dests given on the command line or by PET_*
  // Every option given (on the command line or by PET_*), in the option table's order, as it was
  // given: a head-node launch passes them on to every host's agent (remote_command.hpp), which
  // parses them for its own workers. A flag's text is empty; a repeated option has one entry per
  // value.
  struct GivenText {
    std::string dest;
    std::string text;
    bool flag = false;
  };
  std::vector<GivenText> as_given;
  Dialect dialect = Dialect::kTorchrun;  // `ddprun launch`'s: its hosts' agents speak it too
  // --signals_to_handle's text: workers see it as TORCHELASTIC_SIGNALS_TO_HANDLE, as torchrun
  // sets it.
  std::string signals_to_handle;
};

// Parses argv[1..] with `env` as the environment (PET_* fallbacks, TORCH_ELASTIC_SHUTDOWN_TIMEOUT,
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE). Throws UsageError with a one-line message,
// HelpRequested or CompletionRequested.
LaunchConfig parse_command_line(const std::vector<std::string>& args, const agent::Environment& env,
                                Dialect dialect = Dialect::kTorchrun);

// The text `ddprun --help` prints.
std::string cli_help();

constexpr int64_t kMaxStandbyWorkers = 64;  // --standby_workers: per node

// Exit statuses of `ddprun`, documented in --help and docs/cli.md.
constexpr int kExitSuccess = 0;
constexpr int kExitWorkerFailure = 1;  // also a RefusedValue, as torchrun's exit status for it
constexpr int kExitUsage = 2;
constexpr int kExitLaunchError = 3;
constexpr int kExitUnhealthy = 4;  // --health_check failed: this node did not join, or left
constexpr int kExitCrashLoop = 5;  // --crash_loop_attempts: failing the same way; do not requeue
// Shut down by signal N (forwarded to the workers first): 128 + N.

}  // namespace ddprun::launcher
