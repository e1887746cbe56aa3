#include "option_table.hpp"

namespace ddprun::launcher {

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = {
      {"--nnodes", "nnodes", "N|MIN:MAX",
       "number of nodes; MIN:MAX is an elastic job (--rdzv_backend=c10d)"},
      {"--nproc-per-node,--nproc_per_node", "nproc_per_node", "N|auto|cpu|gpu|xpu",
       "workers per node; gpu and auto count the GPUs CUDA_VISIBLE_DEVICES leaves visible (xpu: "
       "ddprun counts NVIDIA GPUs only, and refuses it)"},
      {"--standalone", "standalone", nullptr,
       "single node, a store on a free port, a random run id"},
      {"--rdzv-backend,--rdzv_backend", "rdzv_backend", "static|c10d|etcd-v3",
       "how nodes meet (default static); etcd and etcd-v2 mean etcd-v3: etcd 3.4+ over its v3 API"},
      {"--rdzv-endpoint,--rdzv_endpoint", "rdzv_endpoint", "HOST[:PORT]",
       "c10d: the store every node joins (default port 29400); ddprund there, or the first agent. "
       "etcd: the cluster's members, comma-separated (default port 2379)"},
      {"--rdzv-id,--rdzv_id", "rdzv_id", "ID", "the job's id, the same on every node"},
      {"--rdzv-conf,--rdzv_conf", "rdzv_conf", "K=V,...",
       "join_timeout, last_call_timeout, heartbeat_timeout (or keep_alive_interval and "
       "keep_alive_max_attempt), is_host, reconnect_timeout (c10d: how long a lost ddprund is "
       "waited for, workers running; default 30); read_timeout, close_timeout, timeout, "
       "store_type; "
       "protocol=https, cacert, cert, key (or ca_cert, ssl_cert, ssl_cert_key): TLS to the job's "
       "store; auth_token_file (c10d, static); etcd: etcd_prefix, user, password_file"},
      {"--max-restarts,--max_restarts", "max_restarts", "N",
       "job-wide restarts of the worker groups before failing (default 0)"},
      {"--monitor-interval,--monitor_interval", "monitor_interval", "S",
       "accepted for compatibility: worker exits are seen as events"},
      {"--start-method,--start_method", "start_method", "M",
       "accepted for compatibility: spawn, fork or forkserver"},
      {"--event-log-handler,--event_log_handler",
       "event_log_handler",
       "null|console|dynamic_rendezvous",
       "console: each event (as --event_log writes it) also as a JSON line on stderr; null and "
       "dynamic_rendezvous: none (the default)",
       {"null", "console", "dynamic_rendezvous"}},
      {.names = "--event-log,--event_log",
       .dest = "event_log",
       .metavar = "FILE",
       .help =
           "append one JSON object per line to FILE for every event this agent sees (rounds, nodes "
           "joining and leaving, workers started and exited, restarts, the exit barrier, the end)",
       .ddprun_only = true},
      {.names = "--metrics-port,--metrics_port",
       .dest = "metrics_port",
       .metavar = "PORT",
       .help = "serve this agent's Prometheus metrics at http://ADDR:PORT/metrics (0 picks a free "
               "port)",
       .ddprun_only = true},
      {.names = "--metrics-addr,--metrics_addr",
       .dest = "metrics_addr",
       .metavar = "ADDR",
       .help = "the address --metrics_port listens on (default 127.0.0.1, this host only; :: or "
               "0.0.0.0 every address)",
       .ddprun_only = true},
      {.names = "--hang-timeout,--hang_timeout",
       .dest = "hang_timeout",
       .metavar = "S|auto",
       .help = "a worker without progress (a heartbeat, a torch timer, or while it sends no "
               "heartbeat a line of output) for S seconds is hung: the group stops and restarts as "
               "for a failure; auto learns S from the intervals seen (off by default)",
       .ddprun_only = true},
      {.names = "--checkpoint-memory-limit,--checkpoint_memory_limit",
       .dest = "checkpoint_memory_limit",
       .metavar = "BYTES",
       .help = "the most this node's in-memory checkpoints (ddprun.checkpoint) may hold, all ranks "
               "together, as bytes or with a suffix K, M, G, T (powers of 1024); a save over it "
               "fails naming the sizes (default: no bound but /dev/shm's)",
       .ddprun_only = true},
      {.names = "--no-checkpoint-peer-copies,--no_checkpoint_peer_copies",
       .dest = "no_checkpoint_peer_copies",
       .metavar = nullptr,
       .help = "in a job of several nodes, do not copy this node's in-memory checkpoints to its "
               "peer node (nor hold the peer's): a lost node's ranks then restore from "
               "--checkpoint_dir",
       .ddprun_only = true},
      {.names = "--checkpoint-dir,--checkpoint_dir",
       .dest = "checkpoint_dir",
       .metavar = "DIR",
       .help = "persist complete in-memory checkpoints to DIR/step_<N>/ in the background (a "
               "torch.distributed.checkpoint save in torch's own layout), and restore from the "
               "newest complete one when the job starts with nothing in memory",
       .ddprun_only = true},
      {.names = "--checkpoint-persist-every,--checkpoint_persist_every",
       .dest = "checkpoint_persist_every",
       .metavar = "N",
       .help = "with --checkpoint_dir, persist the first step saved in each span of N steps, and "
               "the newest one when workers fail (default 100)",
       .ddprun_only = true},
      {.names = "--crash-loop-attempts,--crash_loop_attempts",
       .dest = "crash_loop_attempts",
       .metavar = "N",
       .help = "stop the job, with exit status 5 (do not requeue), once N attempts in a row failed "
               "the same way (same rank, exit, exception and frame, resumed from the same "
               "checkpoint step), whatever restarts remain (default 3; 0: never)",
       .ddprun_only = true},
      {.names = "--restart-mode,--restart_mode",
       .dest = "restart_mode",
       .metavar = "process|in_process",
       .help = "how workers restart after a failure: every worker's process anew (default, as "
               "torchrun), or in_process: only the failed ranks' processes are replaced and the "
               "others run their training again in their own processes (those that run it under "
               "ddprun.inprocess; workers that do not restart as processes)",
       .ddprun_only = true},
      {.names = "--standby-workers,--standby_workers",
       .dest = "standby_workers",
       .metavar = "N",
       .help = "with --restart_mode=in_process, keep N standby processes per node that run the "
               "script without a rank up to ddprun.inprocess.run() (and its inprocess.warm_up()) "
               "and wait: a failed worker's place is taken by a standby instead of a new process "
               "(default 0)",
       .ddprun_only = true},
      {.names = "--health-check,--health_check",
       .dest = "health_check",
       .metavar = "CMD",
       .help =
           "run CMD with /bin/sh before this node joins each round; a non-zero exit or a timeout "
           "keeps the node out of the job (exit status 4, the reason the command's last line)",
       .ddprun_only = true},
      {.names = "--health-check-timeout,--health_check_timeout",
       .dest = "health_check_timeout",
       .metavar = "S",
       .help = "seconds --health_check may take (default 60)",
       .ddprun_only = true},
      {.names = "--node-check,--node_check",
       .dest = "node_check",
       .metavar = nullptr,
       .help = "after a round forms and before its workers start (the first round, and each with "
               "a node not checked before), time a fixed compute kernel on every node and the "
               "links between pairs of nodes; a node slower than --node_check_factor times the "
               "round's median, or silent past --node_check_timeout, is kept out of the job as a "
               "failing --health_check is",
       .ddprun_only = true},
      {.names = "--node-check-factor,--node_check_factor",
       .dest = "node_check_factor",
       .metavar = "X",
       .help = "how many times slower than the round's median a node's compute or link may be "
               "(default 2.0)",
       .ddprun_only = true},
      {.names = "--node-check-timeout,--node_check_timeout",
       .dest = "node_check_timeout",
       .metavar = "S",
       .help = "seconds the node check may take; a node that has not answered by then counts as "
               "failed (default 30)",
       .ddprun_only = true},
      {.names = "--straggler-threshold,--straggler_threshold",
       .dest = "straggler_threshold",
       .metavar = "F",
       .help = "while the job trains (more than one node), each rank's steps are timed: a node "
               "whose ranks hold every step back by more than this fraction of the step, for "
               "--straggler_steps steps in a row, is named slow (default 0.2; 0: not watched)",
       .ddprun_only = true},
      {.names = "--straggler-steps,--straggler_steps",
       .dest = "straggler_steps",
       .metavar = "N",
       .help = "consecutive steps a node must hold back at least before it is named slow "
               "(default 5; one just beyond the threshold must for longer)",
       .ddprun_only = true},
      {.names = "--straggler-action,--straggler_action",
       .dest = "straggler_action",
       .metavar = "report|replace",
       .help = "what a slow node's verdict does: report it (default), or replace the node: it "
               "leaves the job and the round re-forms without it, a spare in its place where one "
               "waits, restored from the checkpoints in memory",
       .ddprun_only = true},
      {.names = "--preload",
       .dest = "preload",
       .metavar = "MODULE,...|auto",
       .help = "Python workers fork from one interpreter per node that imported these modules once "
               "(auto: torch and what DDP imports on first use), at the first start and every "
               "restart; workers start cold, with one log line saying why, where that is not safe",
       .ddprun_only = true},
      {"--role", "role", "NAME", "ROLE_NAME and the console prefix (default \"default\")"},
      {"-m,--module", "module", nullptr, "run the script as `python -m`"},
      {"--no-python,--no_python", "no_python", nullptr, "run the script as an executable"},
      {"--run-path,--run_path", "run_path", nullptr,
       "run the script with python (runpy.run_path semantics)"},
      {"--log-dir,--log_dir", "log_dir", "DIR",
       "DIR/<run_id>_<rand>/attempt_<n>/<local_rank>/{stdout,stderr}.log and error.json"},
      {"-r,--redirects", "redirects", "0-3|R:V,...",
       "redirect stdout (1), stderr (2) or both (3) of all or some ranks to the log files"},
      {"-t,--tee", "tee", "0-3|R:V,...",
       "like --redirects, and to the console with a [role rank]: prefix"},
      {"--log-line-prefix-template,--log_line_prefix_template", "log_line_prefix_template",
       "TEMPLATE",
       "the console prefix of teed lines, with ${role_name}, ${rank}, ${local_rank}, ${hostname} "
       "(default TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else [${role_name}${local_rank}]:)"},
      {"--local-ranks-filter,--local_ranks_filter", "local_ranks_filter", "R,...",
       "local ranks whose output reaches the console"},
      {"--duplicate-stdout-filters,--duplicate_stdout_filters", "duplicate_stdout_filters", "S1,S2",
       "teed stdout lines shown on the console that contain any of these strings (,, is a "
       "comma) are copied to <attempt folder>/filtered_stdout.log"},
      {"--duplicate-stderr-filters,--duplicate_stderr_filters", "duplicate_stderr_filters", "S1,S2",
       "the same for stderr, to <attempt folder>/filtered_stderr.log"},
      {"--node-rank,--node_rank", "node_rank", "N", "static: this node's rank"},
      {"--master-addr,--master_addr", "master_addr", "ADDR",
       "static: node 0's address (default 127.0.0.1)"},
      {"--master-port,--master_port", "master_port", "PORT",
       "static: node 0's store port (default 29500); 0 lets the OS pick on one node"},
      {"--local-addr,--local_addr", "local_addr", "ADDR",
       "this node's address as the others reach it"},
      {"--signals-to-handle,--signals_to_handle", "signals_to_handle", "LIST",
       "signals forwarded to the workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT)"},
      {"--shutdown-timeout,--shutdown_timeout", "shutdown_timeout", "S",
       "seconds from SIGTERM to SIGKILL when stopping workers (default "
       "TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30)"},
      {"--virtual-local-rank,--virtual_local_rank", "virtual_local_rank", nullptr,
       "LOCAL_RANK=0 and one CUDA device per worker"},
      {"--logs-specs,--logs_specs",
       "logs_specs",
       "NAME",
       "refused: a Python entry point (ddprun writes torchrun's default layout)",
       {},
       false},
      {"--numa-binding,--numa_binding",
       "numa_binding",
       "MODE",
       "bind each worker to CPUs near the GPU whose index is its local rank: all of its NUMA "
       "node, all of its socket, an exclusive share of its node's cores, or one core complex",
       {"node", "socket", "exclusive", "core-complex"},
       false},
      {.names = "--no-slurm,--no_slurm",
       .dest = "no_slurm",
       .metavar = nullptr,
       .help =
           "ignore Slurm's and Open MPI's variables (by default srun's or mpirun's placement fills "
           "--nnodes, --node_rank, --master_addr, --master_port and --rdzv_id where not given)",
       .ddprun_only = true},
      {.names = "--hostfile",
       .dest = "hostfile",
       .metavar = "FILE",
       .help = "head-node launch: start one agent per host of FILE (lines: host slots=N) over ssh",
       .ddprun_only = true},
      {.names = "-H,--hosts",
       .dest = "hosts",
       .metavar = "H1:N,H2:N",
       .help = "head-node launch on these hosts (N: that host's workers when --nproc_per_node is "
               "not given)",
       .ddprun_only = true},
      {.names = "--include",
       .dest = "include",
       .metavar = "H1@H2",
       .help = "head-node launch: only these hosts",
       .ddprun_only = true},
      {.names = "--exclude",
       .dest = "exclude",
       .metavar = "H1@H2",
       .help = "head-node launch: not these hosts",
       .ddprun_only = true},
      {.names = "--ssh-port,--ssh_port",
       .dest = "ssh_port",
       .metavar = "PORT",
       .help = "head-node launch: ssh's port",
       .ddprun_only = true},
      {.names = "--ssh-identity,--ssh_identity",
       .dest = "ssh_identity",
       .metavar = "FILE",
       .help = "head-node launch: ssh's identity file (-i)",
       .ddprun_only = true},
      {.names = "--ssh-option,--ssh_option",
       .dest = "ssh_option",
       .metavar = "OPT",
       .help =
           "head-node launch: one more ssh -o option, e.g. StrictHostKeyChecking=no (repeatable)",
       .pet = false,
       .repeated = true,
       .ddprun_only = true},
      {.names = "--env",
       .dest = "env",
       .metavar = "VAR[=VALUE]",
       .help =
           "head-node launch: set VAR on every host, to VALUE or to its value here (repeatable)",
       .pet = false,
       .repeated = true,
       .ddprun_only = true},
      {.names = "--head-control,--head_control",
       .dest = "head_control",
       .metavar = nullptr,
       .help =
           "internal: started by a head node; stdin carries its signals, and its end stops the job",
       .pet = false,
       .ddprun_only = true},
      {"--print-completion,--print_completion",
       "print_completion",
       "SHELL",
       "print a completion script of ddprun's options for the shell and exit",
       {"bash", "zsh", "tcsh"},
       false},
  };
  return table;
}

const std::vector<OptionSpec>& launch_option_table() {
  static const std::vector<OptionSpec> table = {
      {"--use-env,--use_env",
       "use_env",
       nullptr,
       "ddprun launch: the script reads LOCAL_RANK from the environment; without it the script "
       "gets --local-rank=N before its own arguments (torch.distributed.launch)",
       {},
       false},
      {.names = "--legacy-local-rank,--legacy_local_rank",
       .dest = "legacy_local_rank",
       .metavar = nullptr,
       .help = "ddprun launch: give the script torch 1.x's spelling, --local_rank=N",
       .pet = false,
       .ddprun_only = true},
  };
  return table;
}

}  // namespace ddprun::launcher
