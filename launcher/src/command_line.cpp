#include <algorithm>
#include <charconv>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "ddprun/agent/log_spec.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/launcher/launch_config.hpp"
#include "ddprun/launcher/visible_gpus.hpp"

namespace ddprun::launcher {
namespace {

// One torchrun option: its spellings, argparse's dest (which names the PET_ variable), and where
// the raw text goes. Values are kept as text and converted once, so PET_* goes through the same
// checks.
struct ValueOption {
  const char* names;
  const char* dest;
  const char* help;
  std::string* text;
};
struct FlagOption {
  const char* names;
  const char* dest;
  const char* help;
  bool* value;
};

// argparse's dest in upper case behind PET_ (torchrun's argparse_util.env).
std::string pet_name(const char* dest) {
  std::string name = "PET_";
  for (const char* p = dest; *p != '\0'; ++p) name.push_back(static_cast<char>(std::toupper(*p)));
  return name;
}

template <class T>
T parse_number(const std::string& text, const char* what) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) {
    throw UsageError(fmt::format("argument {}: invalid value '{}'", what, text));
  }
  return value;
}

double parse_double(const std::string& text, const char* what) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("argument {}: invalid float value '{}'", what, text));
}

void parse_nnodes(const std::string& text, LaunchConfig& c) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    c.min_nodes = c.max_nodes = parse_number<int>(text, "--nnodes");
  } else {
    c.min_nodes = parse_number<int>(text.substr(0, colon), "--nnodes");
    c.max_nodes = parse_number<int>(text.substr(colon + 1), "--nnodes");
  }
  if (c.min_nodes <= 0 || c.max_nodes < c.min_nodes) {
    throw UsageError(
        fmt::format("argument --nnodes: '{}' must be N or MIN:MAX with 0 < MIN <= MAX", text));
  }
}

int visible_gpus(const agent::Environment& env) {
  const auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it == env.end()) return gpu_device_nodes();
  return visible_gpu_count(it->second, gpu_device_nodes(), gpu_uuids());
}

int resolve_nproc(const std::string& text, const agent::Environment& env) {
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (text == "cpu") return cpus;
  if (text == "gpu") {
    const int gpus = visible_gpus(env);
    if (gpus == 0) {
      const auto cvd = env.find("CUDA_VISIBLE_DEVICES");
      throw UsageError(fmt::format(
          "--nproc_per_node=gpu but no GPU is visible on this node{}",
          cvd == env.end() ? "" : fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", cvd->second)));
    }
    return gpus;
  }
  if (text == "auto") {
    const int gpus = visible_gpus(env);
    return gpus > 0 ? gpus : cpus;
  }
  const int n = parse_number<int>(text, "--nproc_per_node");
  if (n <= 0)
    throw UsageError(fmt::format("argument --nproc_per_node: must be positive, got {}", n));
  return n;
}

std::string random_run_id() {
  std::random_device rd;
  std::mt19937_64 gen(rd());
  return fmt::format("{:016x}{:016x}", gen(), gen());
}

// The rdzv_conf keys torchrun reads; others are refused so that typos do not pass silently.
std::map<std::string, std::string> parse_rdzv_conf(const std::string& text) {
  std::map<std::string, std::string> out;
  static const std::vector<std::string> kKnown = {
      "join_timeout", "last_call_timeout",   "close_timeout",          "read_timeout",
      "is_host",      "keep_alive_interval", "keep_alive_max_attempt", "heartbeat_timeout",
      "timeout",      "store_type"};
  if (text.empty()) return out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UsageError(fmt::format("argument --rdzv_conf: '{}' is not key=value", item));
    }
    const std::string key = item.substr(0, eq);
    if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
      throw UsageError(fmt::format("argument --rdzv_conf: unknown key '{}'", key));
    }
    out[key] = item.substr(eq + 1);
    start = comma + 1;
  }
  return out;
}

}  // namespace

LaunchConfig parse_command_line(const std::vector<std::string>& args,
                                const agent::Environment& env) {
  LaunchConfig c;
  std::string nnodes = "1:1", max_restarts = "0", monitor_interval = "0.1", node_rank = "0";
  std::string master_port, shutdown_timeout, event_log_handler = "null", logs_specs, numa_binding;
  std::string dup_stdout, dup_stderr;
  const std::vector<ValueOption> values = {
      {"--nnodes", "nnodes", "Number of nodes, N or MIN:MAX", &nnodes},
      {"--nproc_per_node,--nproc-per-node", "nproc_per_node",
       "Workers per node: N, auto, cpu or gpu", &c.nproc_per_node},
      {"--rdzv_backend,--rdzv-backend", "rdzv_backend", "Rendezvous backend", &c.rdzv_backend},
      {"--rdzv_endpoint,--rdzv-endpoint", "rdzv_endpoint", "Rendezvous endpoint host[:port]",
       &c.rdzv_endpoint},
      {"--rdzv_id,--rdzv-id", "rdzv_id", "Job id", &c.rdzv_id},
      {"--rdzv_conf,--rdzv-conf", "rdzv_conf", "Rendezvous configuration k1=v1,k2=v2",
       &c.rdzv_conf},
      {"--max_restarts,--max-restarts", "max_restarts",
       "Restarts of the worker group before failing", &max_restarts},
      {"--monitor_interval,--monitor-interval", "monitor_interval",
       "Accepted for compatibility: ddprun watches workers by event", &monitor_interval},
      {"--start_method,--start-method", "start_method", "spawn, fork or forkserver (compatibility)",
       &c.start_method},
      {"--event_log_handler,--event-log-handler", "event_log_handler", "Only 'null'",
       &event_log_handler},
      {"--role", "role", "Worker role name", &c.role},
      {"--log_dir,--log-dir", "log_dir", "Base folder for worker logs and error files", &c.log_dir},
      {"-r,--redirects", "redirects", "Redirect std streams to log files: 0-3 or rank:value,...",
       &c.redirects},
      {"-t,--tee", "tee", "Tee std streams to log files and console: 0-3 or rank:value,...",
       &c.tee},
      {"--local_ranks_filter,--local-ranks-filter", "local_ranks_filter",
       "Local ranks whose output is shown on the console, e.g. 0,1", &c.local_ranks_filter},
      {"--duplicate_stdout_filters,--duplicate-stdout-filters", "duplicate_stdout_filters",
       "Not supported yet", &dup_stdout},
      {"--duplicate_stderr_filters,--duplicate-stderr-filters", "duplicate_stderr_filters",
       "Not supported yet", &dup_stderr},
      {"--node_rank,--node-rank", "node_rank", "Rank of this node (static backend)", &node_rank},
      {"--master_addr,--master-addr", "master_addr", "Address of the rank-0 node (static backend)",
       &c.master_addr},
      {"--master_port,--master-port", "master_port",
       "Store port (static backend); 0 lets the OS pick", &master_port},
      {"--local_addr,--local-addr", "local_addr", "Address of this node", &c.local_addr},
      {"--signals_to_handle,--signals-to-handle", "signals_to_handle",
       "Signals forwarded to the workers", &c.signals_to_handle},
      {"--shutdown_timeout,--shutdown-timeout", "shutdown_timeout",
       "Seconds between SIGTERM and SIGKILL when stopping workers", &shutdown_timeout},
  };
  const std::vector<FlagOption> flags = {
      {"--standalone", "standalone", "Single-node job with a local store on a free port",
       &c.standalone},
      {"-m,--module", "module", "Run the script as a Python module (python -m)", &c.module},
      {"--no_python,--no-python", "no_python", "Run the script as an executable, without python",
       &c.no_python},
      {"--run_path,--run-path", "run_path", "Run the script with runpy.run_path semantics",
       &c.run_path},
      {"--virtual_local_rank,--virtual-local-rank", "virtual_local_rank",
       "LOCAL_RANK=0 and one CUDA device per worker", &c.virtual_local_rank},
  };

  CLI::App app{"ddprun"};
  app.prefix_command();  // everything from the training script on belongs to the script
  std::vector<std::pair<CLI::Option*, const ValueOption*>> value_opts;
  for (const auto& v : values)
    value_opts.emplace_back(app.add_option(v.names, *v.text, v.help), &v);
  std::vector<std::pair<CLI::Option*, const FlagOption*>> flag_opts;
  for (const auto& f : flags) flag_opts.emplace_back(app.add_flag(f.names, *f.value, f.help), &f);
  // Python's plugin mechanisms; parsed so that the refusal can say why.
  auto* logs_specs_opt = app.add_option("--logs_specs,--logs-specs", logs_specs);
  auto* numa_opt = app.add_option("--numa_binding,--numa-binding", numa_binding);

  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested{};
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }

  for (const auto& [opt, spec] : value_opts) {
    if (opt->count() > 0) continue;
    auto it = env.find(pet_name(spec->dest));
    if (it != env.end()) *spec->text = it->second;
  }
  for (const auto& [opt, spec] : flag_opts) {
    if (opt->count() > 0) continue;
    const std::string name = pet_name(spec->dest);
    auto it = env.find(name);
    if (it != env.end()) *spec->value = parse_number<long>(it->second, name.c_str()) != 0;
  }

  std::vector<std::string> rest = app.remaining();
  if (rest.empty()) throw UsageError("the following arguments are required: training_script");
  if (rest.front().starts_with("-") && rest.front() != "-") {
    throw UsageError(fmt::format("unrecognized argument: {}", rest.front()));
  }
  c.training_script = rest.front();
  c.training_script_args.assign(rest.begin() + 1, rest.end());

  parse_nnodes(nnodes, c);
  c.nproc = resolve_nproc(c.nproc_per_node, env);
  c.max_restarts = parse_number<int>(max_restarts, "--max_restarts");
  if (c.max_restarts < 0) throw UsageError("argument --max_restarts: must not be negative");
  c.monitor_interval = parse_double(monitor_interval, "--monitor_interval");
  c.node_rank = parse_number<int>(node_rank, "--node_rank");
  if (!master_port.empty()) {
    const int p = parse_number<int>(master_port, "--master_port");
    if (p < 0 || p > 65535) throw UsageError("argument --master_port: not a TCP port");
    c.master_port = p;
  }
  if (shutdown_timeout.empty()) {
    if (auto it = env.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"); it != env.end()) {
      shutdown_timeout = it->second;
    }
  }
  if (!shutdown_timeout.empty()) {
    c.shutdown_timeout = parse_number<int>(shutdown_timeout, "--shutdown_timeout");
    if (*c.shutdown_timeout < 0)
      throw UsageError("argument --shutdown_timeout: must not be negative");
  }
  if (c.start_method != "spawn" && c.start_method != "fork" && c.start_method != "forkserver") {
    throw UsageError(fmt::format(
        "argument --start_method: invalid choice '{}' (choose from spawn, fork, forkserver)",
        c.start_method));
  }
  try {
    agent::parse_std_spec(c.redirects, c.nproc);
    agent::parse_std_spec(c.tee, c.nproc);
    agent::parse_rank_filter(c.local_ranks_filter);
    agent::parse_signal_list(c.signals_to_handle);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  c.rdzv_config = parse_rdzv_conf(c.rdzv_conf);
  for (const char* k : {"join_timeout", "heartbeat_timeout", "timeout", "last_call_timeout"}) {
    if (auto it = c.rdzv_config.find(k); it != c.rdzv_config.end()) {
      if (parse_double(it->second, "--rdzv_conf") <= 0) {
        throw UsageError(fmt::format("argument --rdzv_conf: {} must be positive seconds", k));
      }
    }
  }

  if (c.no_python && c.module) {
    throw UsageError(
        "don't use both the '--no_python' flag and the '--module' flag at the same time");
  }
  if (event_log_handler != "null") {
    throw UsageError("--event_log_handler: only 'null' is supported (events go to ddprun's log)");
  }
  if (logs_specs_opt->count() > 0) {
    throw UsageError(
        "--logs_specs names a Python entry point; ddprun uses torchrun's default layout");
  }
  if (numa_opt->count() > 0) throw UsageError("--numa_binding is not implemented yet");
  if (!dup_stdout.empty() || !dup_stderr.empty()) {
    throw UsageError(
        "--duplicate_stdout_filters/--duplicate_stderr_filters are not implemented yet");
  }

  if (c.standalone) {
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    c.rdzv_id = random_run_id();
  }
  if (c.rdzv_backend == "c10d" && !c.rdzv_endpoint.empty()) {
    // host[:port], the host possibly an [IPv6] literal.
    const std::string& e = c.rdzv_endpoint;
    const size_t close = e.starts_with("[") ? e.find(']') : std::string::npos;
    if (e.starts_with("[") && close == std::string::npos) {
      throw UsageError(fmt::format("--rdzv_endpoint '{}': unterminated [IPv6] address", e));
    }
    const size_t colon = e.find(':', close == std::string::npos ? 0 : close);
    const bool bare_ipv6 =
        close == std::string::npos && e.find(':', colon + 1) != std::string::npos;
    c.rdzv_host = close != std::string::npos ? e.substr(1, close - 1)
                  : bare_ipv6                ? e
                                             : e.substr(0, colon);
    if (colon != std::string::npos && !bare_ipv6) {
      if (colon == 0) throw UsageError(fmt::format("--rdzv_endpoint '{}': no host", e));
      const std::string port = e.substr(colon + 1);
      int p = -1;
      try {
        size_t used = 0;
        p = std::stoi(port, &used);
        if (used != port.size()) p = -1;
      } catch (const std::exception&) {
      }
      if (p < 0 || p > 65535) throw UsageError(fmt::format("--rdzv_endpoint '{}': bad port", e));
      c.rdzv_port = p;
    }
  }
  if (c.rdzv_backend == "etcd" || c.rdzv_backend == "etcd-v2") {
    throw UsageError(fmt::format("--rdzv_backend={} is not implemented yet", c.rdzv_backend));
  }
  if (c.rdzv_backend != "static" && c.rdzv_backend != "c10d") {
    throw UsageError(
        fmt::format("--rdzv_backend: unknown backend '{}' (static or c10d)", c.rdzv_backend));
  }
  if (c.max_nodes > 1 && c.rdzv_backend == "c10d") {
    if (c.rdzv_endpoint.empty()) {
      throw UsageError(fmt::format(
          "--nnodes={}: a multi-node c10d job needs --rdzv_endpoint=HOST[:PORT] (every node the "
          "same), or it would wait on localhost for nodes that never come",
          nnodes));
    }
    if (c.rdzv_port == 0)
      throw UsageError("--rdzv_endpoint: port 0 cannot be found by other nodes");
    if (auto it = c.rdzv_config.find("is_host"); it != c.rdzv_config.end()) {
      static const std::set<std::string> kBools = {"1", "true",  "t", "yes", "y",
                                                   "0", "false", "f", "no",  "n"};
      std::string v = it->second;
      std::transform(v.begin(), v.end(), v.begin(), ::tolower);
      if (!kBools.contains(v)) throw UsageError("--rdzv_conf: is_host must be a boolean");
    }
  }
  if (c.rdzv_backend == "static" && !c.master_port) c.master_port = 29500;
  if (c.max_nodes > 1 && c.rdzv_backend == "static") {
    if (c.min_nodes != c.max_nodes) {
      throw UsageError(fmt::format(
          "--nnodes={}: the static backend needs a fixed number of nodes; elastic MIN:MAX needs "
          "--rdzv_backend=c10d",
          nnodes));
    }
    if (c.node_rank < 0 || c.node_rank >= c.max_nodes) {
      throw UsageError(fmt::format("--node_rank={} is not in [0, {})", c.node_rank, c.max_nodes));
    }
    if (*c.master_port == 0) {
      throw UsageError("--master_port=0 cannot be found by the other nodes: give a port");
    }
  }
  return c;
}

std::string cli_help() {
  return R"(usage: ddprun [options] training_script [training_script_args ...]

A torchrun-compatible launcher. Every option has torchrun's name in both spellings (--nproc_per_node
and --nproc-per-node) and falls back to the PET_<NAME> environment variable (the command line wins).

  --nnodes N|MIN:MAX          number of nodes (one node in this version)
  --nproc_per_node N|auto|cpu|gpu
  --standalone                single node, local store on a free port, random run id
  --rdzv_backend static|c10d  --rdzv_endpoint HOST[:PORT]  --rdzv_id ID  --rdzv_conf K=V,...
  --max_restarts N            restarts of the worker group before giving up (default 0)
  --monitor_interval S        accepted for compatibility; exits are seen as events
  --start_method M            accepted for compatibility (spawn, fork, forkserver)
  --role NAME                 ROLE_NAME and console prefix (default "default")
  -m, --module                run the script as `python -m`
  --no_python                 run the script as an executable
  --run_path                  run the script with `python` (runpy.run_path semantics)
  --log_dir DIR               <DIR>/<run_id>_<rand>/attempt_<n>/<local_rank>/{stdout,stderr}.log,error.json
  -r, --redirects 0-3|R:V,... redirect stdout (1), stderr (2) or both (3) to the log files
  -t, --tee 0-3|R:V,...       like --redirects, and also to the console with a [role rank]: prefix
  --local_ranks_filter R,...  local ranks whose output reaches the console
  --node_rank N  --master_addr ADDR  --master_port PORT (static backend; 0 = a free port)
  --local_addr ADDR
  --signals_to_handle LIST    signals forwarded to the workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT)
  --shutdown_timeout S        seconds from SIGTERM to SIGKILL when stopping workers (default 30)
  --virtual_local_rank        LOCAL_RANK=0 and one CUDA device per worker

Python scripts run as $PYTHON_EXEC (default python3) -u [-m] script args.

Exit status: 0 every worker succeeded; 1 the worker group failed (after the restarts allowed);
2 usage error; 3 the launch itself failed (e.g. the store port is taken); 128+N ddprun received
signal N, forwarded it to the workers and shut down.
)";
}

}  // namespace ddprun::launcher
