#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "command_line_parts.hpp"
#include "completion.hpp"
#include "ddprun/agent/gpu_health.hpp"
#include "ddprun/agent/log_spec.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/agent/split.hpp"
#include "launch_config.hpp"
#include "option_table.hpp"
#include "option_values.hpp"
#include "visible_gpus.hpp"

namespace ddprun::launcher {
namespace {

// argparse's dest in upper case behind PET_ (torchrun's argparse_util.env).
std::string pet_name(const char* dest) {
  std::string name = "PET_";
  for (const char* p = dest; *p != '\0'; ++p) name.push_back(static_cast<char>(std::toupper(*p)));
  return name;
}

int parse_int(const std::string& text, const char* what) {
  const long v = parse_integer(text, what);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    throw UsageError(fmt::format("argument {}: '{}' is out of range", what, text));
  }
  return static_cast<int>(v);
}

void parse_nnodes(const std::string& text, LaunchConfig& c) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    c.min_nodes = c.max_nodes = parse_int(text, "--nnodes");
  } else {
    c.min_nodes = parse_int(text.substr(0, colon), "--nnodes");
    c.max_nodes = parse_int(text.substr(colon + 1), "--nnodes");
  }
  if (c.min_nodes <= 0 || c.max_nodes < c.min_nodes) {
    throw UsageError(
        fmt::format("argument --nnodes: '{}' must be N or MIN:MAX with 0 < MIN <= MAX", text));
  }
}

// The GPUs of this node: Slurm's count for the step where it gives one (and --no_slurm is not
// given), else what CUDA_VISIBLE_DEVICES leaves of the device nodes.
int visible_gpus(const agent::Environment& env, bool use_slurm) {
  if (auto it = env.find("SLURM_GPUS_ON_NODE"); use_slurm && it != env.end()) {
    if (!all_digits(it->second)) {
      throw UsageError(fmt::format("SLURM_GPUS_ON_NODE='{}' is not a number", it->second));
    }
    return parse_int(it->second, "SLURM_GPUS_ON_NODE");
  }
  const auto it = env.find("CUDA_VISIBLE_DEVICES");
  const int nodes = static_cast<int>(agent::gpu_device_nodes());
  if (it == env.end()) return nodes;
  return visible_gpu_count(it->second, nodes, gpu_uuids());
}

int resolve_nproc(const std::string& text, const agent::Environment& env, bool use_slurm) {
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (text == "cpu") return cpus;
  if (text == "gpu") {
    const int gpus = visible_gpus(env, use_slurm);
    if (gpus == 0) {
      const auto cvd = env.find("CUDA_VISIBLE_DEVICES");
      throw UsageError(fmt::format(
          "--nproc_per_node=gpu but no GPU is visible on this node{}",
          cvd == env.end() ? "" : fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", cvd->second)));
    }
    return gpus;
  }
  if (text == "xpu") {
    throw UsageError("--nproc_per_node=xpu: ddprun counts NVIDIA GPUs only; give a number");
  }
  if (text == "auto") {
    const int gpus = visible_gpus(env, use_slurm);
    return gpus > 0 ? gpus : cpus;
  }
  const int n = parse_int(text, "--nproc_per_node");
  if (n <= 0)
    throw UsageError(fmt::format("argument --nproc_per_node: must be positive, got {}", n));
  return n;
}

// torchrun's comma_separated_list: ",," stands for a comma inside a filter (the first pair wins, so
// ",,," is a comma ending one filter), every other comma separates two.
std::vector<std::string> split_filters(const std::string& text) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, ",,") == 0) {
      out.back() += ',';
      ++i;
    } else if (text[i] == ',') {
      out.emplace_back();
    } else {
      out.back() += text[i];
    }
  }
  return out;
}

// The rdzv_conf keys torchrun reads, by the kind of value each takes; others are refused so that
// typos do not pass silently.
enum class ConfKind { kSeconds, kCount, kBool, kText };
const std::map<std::string, ConfKind> kRdzvConfKeys = {
    {"join_timeout", ConfKind::kSeconds},
    {"last_call_timeout", ConfKind::kSeconds},
    {"close_timeout", ConfKind::kSeconds},
    {"read_timeout", ConfKind::kSeconds},
    {"keep_alive_interval", ConfKind::kSeconds},
    {"heartbeat_timeout", ConfKind::kSeconds},
    {"timeout", ConfKind::kSeconds},
    // ddprun's: how long agents ride out a lost standalone c10d store (ddprund restarting).
    {"reconnect_timeout", ConfKind::kSeconds},
    {"keep_alive_max_attempt", ConfKind::kCount},
    {"is_host", ConfKind::kBool},
    {"store_type", ConfKind::kText},
    {"etcd_prefix", ConfKind::kText},
    // etcd over TLS, with torchrun's etcd-v2 spellings beside etcd's own.
    {"protocol", ConfKind::kText},
    {"cacert", ConfKind::kText},
    {"cert", ConfKind::kText},
    {"key", ConfKind::kText},
    {"ca_cert", ConfKind::kText},
    {"ssl_cert", ConfKind::kText},
    {"ssl_cert_key", ConfKind::kText},
};

std::map<std::string, std::string> parse_rdzv_conf(const std::string& text) {
  std::map<std::string, std::string> out;
  if (text.empty()) return out;
  for (const std::string_view item : agent::split(text)) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UsageError(fmt::format("argument --rdzv_conf: '{}' is not key=value", item));
    }
    const std::string key(item.substr(0, eq)), value(item.substr(eq + 1));
    const auto kind = kRdzvConfKeys.find(key);
    if (kind == kRdzvConfKeys.end()) {
      throw UsageError(fmt::format("argument --rdzv_conf: unknown key '{}'", key));
    }
    const std::string what = "--rdzv_conf " + key;
    switch (kind->second) {
      case ConfKind::kSeconds:
        parse_seconds(value, what);
        break;
      case ConfKind::kCount:
        if (parse_integer(value, what) < 1) {
          throw UsageError(fmt::format("argument {}: must be at least 1", what));
        }
        break;
      case ConfKind::kBool:
        parse_bool(value, what);
        break;
      case ConfKind::kText:
        break;
    }
    out[key] = value;
  }
  return out;
}

// rdzv_conf's TLS keys for etcd: protocol=https, and each file under etcd's name or torchrun's
// etcd-v2 one. Files alone imply https. Every file is loaded here, so that a bad one is a usage
// error at once rather than a rendezvous that never forms.
rendezvous::EtcdTls parse_etcd_tls(const std::map<std::string, std::string>& conf) {
  const auto file = [&](const char* name, const char* torch_name) {
    const auto a = conf.find(name), b = conf.find(torch_name);
    if (a != conf.end() && b != conf.end() && a->second != b->second) {
      throw UsageError(
          fmt::format("--rdzv_conf: {} and {} name different files", name, torch_name));
    }
    return a != conf.end() ? a->second : b != conf.end() ? b->second : std::string();
  };
  rendezvous::EtcdTls tls;
  tls.ca_file = file("cacert", "ca_cert");
  tls.cert_file = file("cert", "ssl_cert");
  tls.key_file = file("key", "ssl_cert_key");
  const bool files = !tls.ca_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty();
  const auto protocol = conf.find("protocol");
  if (protocol == conf.end()) {
    tls.enabled = files;
  } else if (protocol->second == "https") {
    tls.enabled = true;
  } else if (protocol->second != "http") {
    throw UsageError(
        fmt::format("--rdzv_conf protocol={}: must be http or https", protocol->second));
  } else if (files) {
    throw UsageError("--rdzv_conf: TLS files (cacert, cert, key) given with protocol=http");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    throw UsageError("--rdzv_conf: a client certificate needs both cert and key");
  }
  try {
    rendezvous::check_etcd_tls(tls);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--rdzv_conf: {}", e.what()));
  }
  return tls;
}

rendezvous::Backend parse_backend(const std::string& name) {
  if (name == "static") return rendezvous::Backend::kStatic;
  if (name == "c10d") return rendezvous::Backend::kC10d;
  if (name == "etcd-v3" || name == "etcd" || name == "etcd-v2") return rendezvous::Backend::kEtcdV3;
  throw UsageError(fmt::format(
      "--rdzv_backend: unknown backend '{}' (static, c10d, or etcd-v3 = etcd = etcd-v2)", name));
}

// host[:port], the host possibly an [IPv6] literal (or a bare one, which then has no port).
std::pair<std::string, int> parse_endpoint(const std::string& e, int default_port) {
  if (e.empty()) throw UsageError("--rdzv_endpoint: an empty endpoint");
  const size_t close = e.starts_with("[") ? e.find(']') : std::string::npos;
  if (e.starts_with("[") && close == std::string::npos) {
    throw UsageError(fmt::format("--rdzv_endpoint '{}': unterminated [IPv6] address", e));
  }
  const size_t colon = e.find(':', close == std::string::npos ? 0 : close);
  const bool bare_ipv6 = close == std::string::npos && e.find(':', colon + 1) != std::string::npos;
  const std::string host = close != std::string::npos ? e.substr(1, close - 1)
                           : bare_ipv6                ? e
                                                      : e.substr(0, colon);
  if (colon == std::string::npos || bare_ipv6) return {host, default_port};
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
  return {host, p};
}

}  // namespace

LaunchConfig parse_command_line(const std::vector<std::string>& args, const agent::Environment& env,
                                Dialect dialect) {
  LaunchConfig c;
  std::string nnodes = "1:1", max_restarts = "0", monitor_interval = "0.1", node_rank = "0";
  std::string master_port, shutdown_timeout, event_log_handler = "null", logs_specs, numa_binding;
  std::string dup_stdout, dup_stderr, print_completion;
  bool use_env = false, legacy_local_rank = false;
  std::string hostfile, host_list, include, exclude, ssh_port, metrics_port, health_check_timeout;
  std::string hang_timeout, preload;
  const std::map<std::string, std::string*> texts = {
      {"nnodes", &nnodes},
      {"nproc_per_node", &c.nproc_per_node},
      {"rdzv_backend", &c.rdzv_backend},
      {"rdzv_endpoint", &c.rdzv_endpoint},
      {"rdzv_id", &c.rdzv_id},
      {"rdzv_conf", &c.rdzv_conf},
      {"max_restarts", &max_restarts},
      {"monitor_interval", &monitor_interval},
      {"start_method", &c.start_method},
      {"event_log_handler", &event_log_handler},
      {"role", &c.role},
      {"log_dir", &c.log_dir},
      {"redirects", &c.redirects},
      {"tee", &c.tee},
      {"log_line_prefix_template", &c.log_line_prefix_template},
      {"local_ranks_filter", &c.local_ranks_filter},
      {"print_completion", &print_completion},
      {"duplicate_stdout_filters", &dup_stdout},
      {"duplicate_stderr_filters", &dup_stderr},
      {"node_rank", &node_rank},
      {"master_addr", &c.master_addr},
      {"master_port", &master_port},
      {"local_addr", &c.local_addr},
      {"signals_to_handle", &c.signals_to_handle},
      {"shutdown_timeout", &shutdown_timeout},
      {"logs_specs", &logs_specs},
      {"numa_binding", &numa_binding},
      {"hostfile", &hostfile},
      {"event_log", &c.event_log},
      {"metrics_port", &metrics_port},
      {"health_check", &c.health_check},
      {"hang_timeout", &hang_timeout},
      {"preload", &preload},
      {"health_check_timeout", &health_check_timeout},
      {"hosts", &host_list},
      {"include", &include},
      {"exclude", &exclude},
      {"ssh_port", &ssh_port},
      {"ssh_identity", &c.ssh_identity},
  };
  const std::map<std::string, std::vector<std::string>*> lists = {
      {"ssh_option", &c.ssh_options},
      {"env", &c.env_vars},
  };
  const std::map<std::string, bool*> switches = {
      {"standalone", &c.standalone},
      {"module", &c.module},
      {"no_python", &c.no_python},
      {"run_path", &c.run_path},
      {"virtual_local_rank", &c.virtual_local_rank},
      {"no_slurm", &c.no_slurm},
      {"head_control", &c.head_control},
      {"use_env", &use_env},
      {"legacy_local_rank", &legacy_local_rank},
  };

  CLI::App app{"ddprun"};
  app.prefix_command();  // everything from the training script on belongs to the script
  std::vector<const OptionSpec*> specs;
  for (const OptionSpec& spec : option_table()) specs.push_back(&spec);
  if (dialect == Dialect::kDistributedLaunch) {
    for (const OptionSpec& spec : launch_option_table()) specs.push_back(&spec);
  }
  std::vector<std::pair<CLI::Option*, const OptionSpec*>> given;
  for (const OptionSpec* p : specs) {
    const OptionSpec& spec = *p;
    CLI::Option* opt = nullptr;
    if (!spec.metavar) {
      opt = app.add_flag(spec.names, *switches.at(spec.dest));
    } else if (lists.contains(spec.dest)) {
      // Repeated, one value each time: `--env A train.py` must not take train.py as a value.
      opt = app.add_option(spec.names, *lists.at(spec.dest))->allow_extra_args(false);
    } else {
      opt = app.add_option(spec.names, *texts.at(spec.dest));
    }
    given.emplace_back(opt, &spec);
  }

  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested{};
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }

  // PET_<DEST> for what the command line did not give.
  for (const auto& [opt, spec] : given) {
    if (opt->count() > 0) {
      c.given.insert(spec->dest);
      continue;
    }
    const std::string name = pet_name(spec->dest);
    auto it = env.find(name);
    if (it == env.end() || lists.contains(spec->dest) || !spec->pet) continue;
    c.given.insert(spec->dest);
    if (spec->metavar) {
      *texts.at(spec->dest) = it->second;
    } else {
      *switches.at(spec->dest) = parse_bool(it->second, name);
    }
  }

  for (const auto& [opt, spec] : given) {
    if (spec->choices.empty() || !c.given.contains(spec->dest)) continue;
    const std::string& value = *texts.at(spec->dest);
    if (std::none_of(spec->choices.begin(), spec->choices.end(),
                     [&](const char* choice) { return value == choice; })) {
      std::string names = spec->names;
      std::replace(names.begin(), names.end(), ',', '/');
      throw UsageError(fmt::format("argument {}: invalid choice: '{}' (choose from {})", names,
                                   value, fmt::join(spec->choices, ", ")));
    }
  }
  if (!print_completion.empty()) throw CompletionRequested{completion_script(print_completion)};

  std::vector<std::string> rest = app.remaining();
  if (rest.empty()) throw UsageError("the following arguments are required: training_script");
  if (rest.front().starts_with("-") && rest.front() != "-") {
    throw UsageError(fmt::format("unrecognized argument: {}", rest.front()));
  }
  c.training_script = rest.front();
  c.training_script_args.assign(rest.begin() + 1, rest.end());

  if (!c.no_slurm) {
    apply_scheduler(env, c, nnodes, node_rank, master_port);
  }

  parse_nnodes(nnodes, c);
  // A head resolves nothing of its hosts' GPUs: each host's agent counts its own.
  const bool head_launch = !hostfile.empty() || !host_list.empty();
  c.nproc = head_launch && !all_digits(c.nproc_per_node)
                ? 1
                : resolve_nproc(c.nproc_per_node, env, !c.no_slurm);
  c.max_restarts = parse_int(max_restarts, "--max_restarts");
  if (c.max_restarts < 0) throw UsageError("argument --max_restarts: must not be negative");
  parse_double(monitor_interval, "--monitor_interval");  // checked; worker exits are events
  c.node_rank = parse_int(node_rank, "--node_rank");
  if (!metrics_port.empty()) {
    const int p = parse_int(metrics_port, "--metrics_port");
    if (p < 0 || p > 65535) throw UsageError("argument --metrics_port: not a TCP port");
    c.metrics_port = p;
  }
  if (hang_timeout == "auto") {
    c.hang.mode = agent::HangPolicy::Mode::kAuto;
  } else if (!hang_timeout.empty()) {
    c.hang.mode = agent::HangPolicy::Mode::kFixed;
    c.hang.timeout = parse_seconds(hang_timeout, "--hang_timeout");
    if (c.hang.timeout.count() <= 0) {
      throw UsageError("argument --hang_timeout: must be positive seconds or auto");
    }
  }
  c.preload = parse_preload(preload);
  if (!health_check_timeout.empty()) {
    c.health_check_timeout = parse_seconds(health_check_timeout, "--health_check_timeout");
    if (c.health_check_timeout.count() <= 0) {
      throw UsageError("argument --health_check_timeout: must be positive");
    }
  }
  if (!master_port.empty()) {
    const int p = parse_int(master_port, "--master_port");
    if (p < 0 || p > 65535) throw UsageError("argument --master_port: not a TCP port");
    c.master_port = p;
  }
  if (shutdown_timeout.empty()) {
    if (auto it = env.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"); it != env.end()) {
      shutdown_timeout = it->second;
    }
  }
  if (!shutdown_timeout.empty()) {
    c.shutdown_timeout = parse_int(shutdown_timeout, "--shutdown_timeout");
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
  for (const char* k :
       {"join_timeout", "heartbeat_timeout", "timeout", "last_call_timeout", "reconnect_timeout"}) {
    if (auto it = c.rdzv_config.find(k); it != c.rdzv_config.end()) {
      if (parse_seconds(it->second, "--rdzv_conf").count() <= 0) {
        throw UsageError(fmt::format("argument --rdzv_conf: {} must be positive seconds", k));
      }
    }
  }

  if (c.no_python && c.module) {
    throw UsageError(
        "don't use both the '--no_python' flag and the '--module' flag at the same time");
  }
  c.event_log_handler = event_log_handler == "console" ? EventLogHandler::kConsole
                        : event_log_handler == "dynamic_rendezvous"
                            ? EventLogHandler::kDynamicRendezvous
                            : EventLogHandler::kNull;
  if (!logs_specs.empty()) {
    throw UsageError(
        "--logs_specs names a Python entry point; ddprun uses torchrun's default layout");
  }
  if (!numa_binding.empty()) c.numa_binding = agent::parse_numa_mode(numa_binding);
  if (c.given.contains("duplicate_stdout_filters")) {
    c.duplicate_stdout_filters = split_filters(dup_stdout);
  }
  if (c.given.contains("duplicate_stderr_filters")) {
    c.duplicate_stderr_filters = split_filters(dup_stderr);
  }
  if (c.log_line_prefix_template.empty()) {
    if (auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != env.end()) {
      c.log_line_prefix_template = it->second;
    }
  }
  if (dialect == Dialect::kDistributedLaunch && !use_env) {
    if (c.no_python) {
      throw UsageError(
          "When using the '--no-python' flag, you must also set the '--use-env' flag.");
    }
    c.local_rank_argument = legacy_local_rank ? "--local_rank" : "--local-rank";
  }

  const bool head = !hostfile.empty() || !host_list.empty();
  if (c.standalone) {
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    c.rdzv_id = random_run_id();
  } else if (c.rdzv_backend == "static" && c.rdzv_endpoint.empty() && !c.master_port &&
             c.max_nodes == 1 && !head && !c.placement) {
    // torch 2.14: one node with no store port asked for gets a c10d store on a free port and a
    // random run id, as --standalone does (two such jobs on a machine no longer collide).
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    c.rdzv_id = random_run_id();
  }
  c.backend = parse_backend(c.rdzv_backend);
  if (c.backend == rendezvous::Backend::kC10d && !c.rdzv_endpoint.empty()) {
    std::tie(c.rdzv_host, c.rdzv_port) = parse_endpoint(c.rdzv_endpoint, c.rdzv_port);
  }
  if (c.backend == rendezvous::Backend::kEtcdV3) {
    if (c.rdzv_endpoint.empty()) {
      throw UsageError("--rdzv_backend=etcd needs --rdzv_endpoint=HOST[:PORT][,HOST[:PORT]...]");
    }
    for (const std::string_view endpoint : agent::split(c.rdzv_endpoint)) {
      const auto [host, port] = parse_endpoint(std::string(endpoint), 2379);
      if (port == 0)
        throw UsageError("--rdzv_endpoint: an etcd endpoint needs a port other than 0");
      c.etcd_endpoints.push_back(rendezvous::EtcdEndpoint{host, port});
    }
    c.rdzv_host = c.etcd_endpoints.front().host;
    c.rdzv_port = c.etcd_endpoints.front().port;
    c.etcd_tls = parse_etcd_tls(c.rdzv_config);
    if (auto it = c.rdzv_config.find("etcd_prefix");
        it != c.rdzv_config.end() && !it->second.starts_with("/")) {
      throw UsageError(fmt::format("--rdzv_conf etcd_prefix={}: must start with /", it->second));
    }
  }
  if (c.max_nodes > 1 && c.backend == rendezvous::Backend::kC10d) {
    if (c.rdzv_endpoint.empty()) {
      throw UsageError(fmt::format(
          "--nnodes={}: a multi-node c10d job needs --rdzv_endpoint=HOST[:PORT] (every node the "
          "same), or it would wait on localhost for nodes that never come",
          nnodes));
    }
    if (c.rdzv_port == 0)
      throw UsageError("--rdzv_endpoint: port 0 cannot be found by other nodes");
  }
  parse_head_node(hostfile, host_list, include, exclude, ssh_port, c);
  if (c.backend == rendezvous::Backend::kStatic && !c.master_port) c.master_port = 29500;
  if (c.max_nodes > 1 && c.backend == rendezvous::Backend::kStatic) {
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

namespace {

// One option's lines of --help: its names and value, then its help word-wrapped to 100 columns
// from column 34 on.
std::string help_lines(const OptionSpec& spec) {
  constexpr size_t kColumn = 34, kWidth = 100;
  std::string out;
  std::string names = spec.names;
  for (size_t comma = names.find(','); comma != std::string::npos;
       comma = names.find(',', comma + 2)) {
    names.replace(comma, 1, ", ");
  }
  const std::string left = "  " + names + (spec.metavar ? std::string(" ") + spec.metavar : "");
  if (left.size() >= kColumn) out += left + "\n";
  std::string line = left.size() < kColumn ? left + std::string(kColumn - left.size(), ' ')
                                           : std::string(kColumn, ' ');
  bool empty = true;
  for (std::string_view words = spec.help; !words.empty();) {
    const size_t space = words.find(' ');
    const std::string_view word = words.substr(0, space);
    if (!empty && line.size() + 1 + word.size() > kWidth) {
      out += line + "\n";
      line = std::string(kColumn, ' ');
      empty = true;
    }
    line += (empty ? "" : " ") + std::string(word);
    empty = false;
    words = space == std::string_view::npos ? std::string_view() : words.substr(space + 1);
  }
  return out + line + "\n";
}

}  // namespace

std::string cli_help() {
  std::string out =
      "usage: ddprun [options] training_script [training_script_args ...]\n"
      "       ddprun launch [options] [--use-env] training_script [training_script_args ...]\n"
      "       ddprun status --rdzv_endpoint=HOST:PORT --rdzv_id=ID [--rdzv_backend=B] [--json]\n\n"
      "A torchrun-compatible launcher: one agent per node starts, watches and restarts the "
      "workers.\nEvery option has torchrun's name in both spellings (--nproc_per_node, "
      "--nproc-per-node) and\nfalls back to the PET_<NAME> variable (the command line wins).\n\n";
  for (const OptionSpec& spec : option_table()) out += help_lines(spec);
  out +=
      "\n`ddprun launch` takes torch.distributed.launch's command line: the options above, and\n";
  for (const OptionSpec& spec : launch_option_table()) out += help_lines(spec);
  out +=
      "\nPython scripts run as $PYTHON_EXEC (default python3) -u [-m] script args.\n\n"
      "Exit status: 0 every worker succeeded; 1 the worker group failed (after the restarts "
      "allowed);\n2 usage error; 3 the launch itself failed (e.g. the store port is taken); 4 "
      "--health_check failed:\nthis node did not join the job, or left it; 128+N ddprun received "
      "signal N, forwarded it\nto the workers and shut down.\n";
  return out;
}

}  // namespace ddprun::launcher
