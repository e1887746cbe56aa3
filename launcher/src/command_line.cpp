#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/asio/ip/address.hpp>

#include "argparse_rules.hpp"
#include "command_line_parts.hpp"
#include "completion.hpp"
#include "ddprun/agent/gpu_health.hpp"
#include "ddprun/agent/log_spec.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/agent/split.hpp"
#include "launch_config.hpp"
#include "option_table.hpp"
#include "option_values.hpp"
#include "rendezvous_options.hpp"
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

// An int, or nullopt where `text` is none.
std::optional<int> as_int(const std::string& text) {
  try {
    return parse_int(text, "");
  } catch (const UsageError&) {
    return std::nullopt;
  }
}

// torchrun reads --nnodes after parsing, so that a malformed one fails the launch (exit 1).
std::pair<int, int> parse_nnodes(const std::string& text) {
  const auto colon = text.find(':');
  const std::optional<int> min_nodes = as_int(text.substr(0, colon));
  const std::optional<int> max_nodes =
      colon == std::string::npos ? min_nodes : as_int(text.substr(colon + 1));
  if (!min_nodes || !max_nodes || *min_nodes <= 0 || *max_nodes < *min_nodes) {
    throw RefusedValue(
        fmt::format("argument --nnodes: '{}' must be N or MIN:MAX with 0 < MIN <= MAX", text));
  }
  return {*min_nodes, *max_nodes};
}

// The GPUs of this node, as torch.cuda.device_count() would see them: what CUDA_VISIBLE_DEVICES,
// where set, leaves of the device nodes (a user who narrowed it inside an allocation gets that
// many); else Slurm's count for the step where it gives one (and --no_slurm is not given); else
// the device nodes.
int visible_gpus(const agent::Environment& env, bool use_slurm) {
  const int nodes = static_cast<int>(agent::gpu_device_nodes());
  if (const auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) {
    return visible_gpu_count(it->second, nodes, gpu_uuids());
  }
  if (auto it = env.find("SLURM_GPUS_ON_NODE"); use_slurm && it != env.end()) {
    if (!all_digits(it->second)) {
      throw UsageError(fmt::format("SLURM_GPUS_ON_NODE='{}' is not a number", it->second));
    }
    return parse_int(it->second, "SLURM_GPUS_ON_NODE");
  }
  return nodes;
}

// The CPUs this process may run on (its affinity mask: taskset, a cpuset, a Slurm step), as
// torchrun counts them for --nproc_per_node=cpu (os.sched_getaffinity).
int cpus_allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int resolve_nproc(const std::string& text, const agent::Environment& env, bool use_slurm) {
  const int cpus = cpus_allowed();
  if (text == "cpu") return cpus;
  if (text == "gpu") {
    const int gpus = visible_gpus(env, use_slurm);
    if (gpus == 0) {
      const auto cvd = env.find("CUDA_VISIBLE_DEVICES");
      throw RefusedValue(fmt::format(
          "--nproc_per_node=gpu but no GPU is visible on this node{}",
          cvd == env.end() ? "" : fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", cvd->second)));
    }
    return gpus;
  }
  if (text == "xpu") {
    throw RefusedValue("--nproc_per_node=xpu: ddprun counts NVIDIA GPUs only; give a number");
  }
  if (text == "auto") {
    const int gpus = visible_gpus(env, use_slurm);
    return gpus > 0 ? gpus : cpus;
  }
  const std::optional<int> n = as_int(text);
  if (!n || *n <= 0) {
    throw RefusedValue(fmt::format(
        "argument --nproc_per_node: '{}' is not a positive count, auto, cpu or gpu", text));
  }
  return *n;
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

// torchrun's defaults of the options whose text is read when nobody gave it.
const std::map<std::string, std::string> kDefaultTexts = {
    {"nnodes", "1:1"},
    {"nproc_per_node", "1"},
    {"rdzv_backend", "static"},
    {"rdzv_id", "none"},
    {"max_restarts", "0"},
    {"monitor_interval", "0.1"},
    {"start_method", "spawn"},
    {"event_log_handler", "null"},
    {"role", "default"},
    {"redirects", "0"},
    {"tee", "0"},
    {"node_rank", "0"},
    {"master_addr", "127.0.0.1"},
    {"signals_to_handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
};

// The options `dialect` reads, in --help's order.
std::vector<const OptionSpec*> specs_of(Dialect dialect) {
  std::vector<const OptionSpec*> specs;
  for (const OptionSpec& spec : option_table()) specs.push_back(&spec);
  if (dialect == Dialect::kDistributedLaunch) {
    for (const OptionSpec& spec : launch_option_table()) specs.push_back(&spec);
  }
  return specs;
}

// The options as given: the command line (read as torchrun's argparse reads it), then
// PET_<DEST> for what it did not give, each value checked against the option's choices. `script`
// gets the training script and its arguments.
OptionTexts read_options(const std::vector<std::string>& args, const agent::Environment& env,
                         Dialect dialect, ArgparseResult& script) {
  OptionTexts o;
  o.text = kDefaultTexts;
  const std::vector<const OptionSpec*> specs = specs_of(dialect);
  script = parse_like_argparse(args, specs);
  for (const GivenOption& given : script.options) {
    const OptionSpec& spec = *given.spec;
    o.given.insert(spec.dest);
    if (!spec.metavar) {
      o.flags[spec.dest] = true;
    } else if (spec.repeated) {
      o.lists[spec.dest].push_back(given.value);
    } else {
      o.text[spec.dest] = given.value;  // the last of a repeated option wins, as in argparse
    }
  }
  for (const OptionSpec* spec : specs) {
    const std::string name = pet_name(spec->dest);
    auto it = env.find(name);
    if (o.given.contains(spec->dest) || it == env.end() || !spec->pet) continue;
    o.given.insert(spec->dest);
    if (spec->metavar) {
      o.text[spec->dest] = it->second;
    } else {
      o.flags[spec->dest] = parse_bool(it->second, name);
    }
  }
  for (const OptionSpec* spec : specs) {
    if (spec->choices.empty() || !o.given.contains(spec->dest)) continue;
    const std::string& value = o[spec->dest];
    if (std::none_of(spec->choices.begin(), spec->choices.end(),
                     [&](const char* choice) { return value == choice; })) {
      std::string names = spec->names;
      std::replace(names.begin(), names.end(), ',', '/');
      throw UsageError(fmt::format("argument {}: invalid choice: '{}' (choose from {})", names,
                                   value, fmt::join(spec->choices, ", ")));
    }
  }
  return o;
}

// A TCP port, or 0 where the OS picks one.
int parse_port(const std::string& text, const char* what) {
  const int p = parse_int(text, what);
  // (An integer argparse takes; torchrun refuses it only when it binds or connects: exit 1.)
  if (p < 0 || p > 65535) throw RefusedValue(fmt::format("argument {}: not a TCP port", what));
  return p;
}

// Positive seconds, fractions allowed.
std::chrono::milliseconds parse_positive_seconds(const std::string& text, const char* what,
                                                 const char* must) {
  const auto s = parse_seconds(text, what);
  if (s.count() <= 0) throw UsageError(fmt::format("argument {}: {}", what, must));
  return s;
}

// --redirects, --tee, --local_ranks_filter and the duplicate filters, for `nproc` workers.
void read_log_options(const OptionTexts& o, int nproc, LaunchConfig& c) {
  try {
    c.redirects = agent::parse_std_spec(o["redirects"], nproc);
    c.tee = agent::parse_std_spec(o["tee"], nproc);
    c.console_ranks = agent::parse_rank_filter(o["local_ranks_filter"]);
  } catch (const std::invalid_argument& e) {
    throw RefusedValue(e.what());  // (torchrun's config_from_args raises: exit 1)
  }
  c.log_dir = o["log_dir"];
  c.log_line_prefix_template = o["log_line_prefix_template"];
  if (o.given.contains("duplicate_stdout_filters")) {
    c.duplicate_stdout_filters = split_filters(o["duplicate_stdout_filters"]);
  }
  if (o.given.contains("duplicate_stderr_filters")) {
    c.duplicate_stderr_filters = split_filters(o["duplicate_stderr_filters"]);
  }
  const std::string& handler = o["event_log_handler"];
  c.event_log_handler = handler == "console"              ? EventLogHandler::kConsole
                        : handler == "dynamic_rendezvous" ? EventLogHandler::kDynamicRendezvous
                                                          : EventLogHandler::kNull;
  c.event_log = o["event_log"];
  if (!o["logs_specs"].empty()) {
    throw UsageError(
        "--logs_specs names a Python entry point; ddprun uses torchrun's default layout");
  }
}

// A size: bytes, or a number with a suffix K, M, G or T (powers of 1024, either case), positive.
uint64_t parse_bytes(const std::string& text, const char* what) {
  static constexpr std::string_view kUnits = "KMGT";
  size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  int shift = 0;
  if (used > 0 && used + 1 == text.size()) {
    const auto unit = kUnits.find(static_cast<char>(std::toupper(text.back())));
    if (unit != std::string_view::npos) {
      shift = 10 * static_cast<int>(unit + 1);
      ++used;
    }
  }
  if (used == 0 || used != text.size() || text.front() == '-' || n == 0 ||
      n > (std::numeric_limits<uint64_t>::max() >> shift)) {
    throw UsageError(
        fmt::format("{}: '{}' is not a size (bytes, or a number with K, M, G or T)", what, text));
  }
  return static_cast<uint64_t>(n) << shift;
}

// --hang_timeout, --health_check(_timeout), --node_check(_factor, _timeout).
void read_check_options(const OptionTexts& o, LaunchConfig& c) {
  const std::string& hang = o["hang_timeout"];
  if (hang == "auto") {
    c.hang.mode = agent::HangPolicy::Mode::kAuto;
  } else if (!hang.empty()) {
    c.hang.mode = agent::HangPolicy::Mode::kFixed;
    c.hang.timeout =
        parse_positive_seconds(hang, "--hang_timeout", "must be positive seconds or auto");
  }
  c.health_check = o["health_check"];
  if (!o["health_check_timeout"].empty()) {
    c.health_check_timeout = parse_positive_seconds(o["health_check_timeout"],
                                                    "--health_check_timeout", "must be positive");
  }
  c.node_check = o.flag("node_check");
  if (!o["node_check_factor"].empty()) {
    c.node_check_factor = parse_double(o["node_check_factor"], "--node_check_factor");
    if (!(c.node_check_factor > 1.0) || c.node_check_factor > 1000.0) {
      throw UsageError(
          fmt::format("--node_check_factor: '{}' is not a factor above 1", o["node_check_factor"]));
    }
  }
  if (!o["node_check_timeout"].empty()) {
    c.node_check_timeout =
        parse_positive_seconds(o["node_check_timeout"], "--node_check_timeout", "must be positive");
  }
}

// --straggler_threshold, --straggler_steps, --straggler_action.
void read_straggler_options(const OptionTexts& o, LaunchConfig& c) {
  if (!o["straggler_threshold"].empty()) {
    c.straggler.threshold = parse_double(o["straggler_threshold"], "--straggler_threshold");
    if (!(c.straggler.threshold >= 0.0) || c.straggler.threshold > 100.0) {
      throw UsageError(fmt::format(
          "--straggler_threshold: '{}' is not a fraction of the step from 0 (not watched) to 100",
          o["straggler_threshold"]));
    }
  }
  if (!o["straggler_steps"].empty()) {
    const int64_t steps = parse_int(o["straggler_steps"], "--straggler_steps");
    if (steps < 1 || steps > 1'000'000) {
      throw UsageError(fmt::format("--straggler_steps: '{}' is not a number of steps from 1 on",
                                   o["straggler_steps"]));
    }
    c.straggler.steps = static_cast<int>(steps);
  }
  if (const std::string action = o["straggler_action"]; action == "replace") {
    c.straggler.action = agent::StragglerPolicy::Action::kReplace;
  } else if (!action.empty() && action != "report") {
    throw UsageError(fmt::format("--straggler_action: '{}' is not one of report, replace", action));
  }
}

// --checkpoint_memory_limit, --no_checkpoint_peer_copies, --checkpoint_dir,
// --checkpoint_persist_every, --restart_mode, --standby_workers, --crash_loop_attempts.
void read_restart_options(const OptionTexts& o, LaunchConfig& c) {
  if (!o["checkpoint_memory_limit"].empty()) {
    c.checkpoint_memory_limit =
        parse_bytes(o["checkpoint_memory_limit"], "--checkpoint_memory_limit");
  }
  c.checkpoint_peer_copies = !o.flag("no_checkpoint_peer_copies");
  if (!o["checkpoint_dir"].empty()) {
    c.checkpoint_dir = std::filesystem::absolute(o["checkpoint_dir"]).lexically_normal().string();
  }
  if (!o["checkpoint_persist_every"].empty()) {
    c.checkpoint_persist_every =
        parse_int(o["checkpoint_persist_every"], "--checkpoint_persist_every");
    if (c.checkpoint_persist_every < 1) {
      throw UsageError(
          fmt::format("--checkpoint_persist_every: '{}' is not a positive number of steps",
                      o["checkpoint_persist_every"]));
    }
  }
  if (const std::string mode = o["restart_mode"]; mode == "in_process") {
    c.restart_mode = agent::RestartMode::kInProcess;
  } else if (!mode.empty() && mode != "process") {
    throw UsageError(fmt::format("--restart_mode: '{}' is not one of process, in_process", mode));
  }
  if (!o["standby_workers"].empty()) {
    c.standby_workers = parse_int(o["standby_workers"], "--standby_workers");
    if (c.standby_workers < 0 || c.standby_workers > kMaxStandbyWorkers) {
      throw UsageError(fmt::format("--standby_workers: '{}' is not a number from 0 to {}",
                                   o["standby_workers"], kMaxStandbyWorkers));
    }
    if (c.standby_workers > 0 && c.restart_mode != agent::RestartMode::kInProcess) {
      throw UsageError(
          "--standby_workers: standbys take failed workers' places in an in-process "
          "restart: add --restart_mode=in_process");
    }
  }
  if (!o["crash_loop_attempts"].empty()) {
    c.crash_loop_attempts = parse_int(o["crash_loop_attempts"], "--crash_loop_attempts");
    if (c.crash_loop_attempts < 0 || c.crash_loop_attempts == 1) {
      throw UsageError(fmt::format(
          "--crash_loop_attempts: '{}' is not 0 (never) or a number of attempts from 2 on",
          o["crash_loop_attempts"]));
    }
  }
}

// What watches the job and how it restarts (above), --metrics_port/--metrics_addr, --preload,
// --numa_binding.
void read_watch_options(const OptionTexts& o, LaunchConfig& c) {
  read_check_options(o, c);
  read_straggler_options(o, c);
  if (!o["metrics_port"].empty()) c.metrics_port = parse_port(o["metrics_port"], "--metrics_port");
  if (!o["metrics_addr"].empty()) {
    boost::system::error_code ec;
    boost::asio::ip::make_address(o["metrics_addr"], ec);
    if (ec) {
      throw UsageError(fmt::format("--metrics_addr: '{}' is not an IP address", o["metrics_addr"]));
    }
    c.metrics_addr = o["metrics_addr"];
  }
  c.preload = parse_preload(o["preload"]);
  read_restart_options(o, c);
  if (!o["numa_binding"].empty()) c.numa_binding = agent::parse_numa_mode(o["numa_binding"]);
}

// --virtual_local_rank gives local rank L the L-th device of CUDA_VISIBLE_DEVICES: torchrun refuses
// more workers than it lists (two would share one GPU). A set but empty one lists one empty entry,
// as Python splits it: one worker, which sees no GPU (not every GPU the user hid).
// This node's workers are local ranks [first, end).
void check_virtual_devices(const agent::Environment& env, int first, int end) {
  const auto visible = env.find("CUDA_VISIBLE_DEVICES");
  if (visible == env.end()) return;
  const int devices = static_cast<int>(agent::split(visible->second).size());
  if (end > devices) {
    throw RefusedValue(fmt::format(
        "--virtual_local_rank: local rank {} exceeds the devices of CUDA_VISIBLE_DEVICES={}",
        std::max(first, devices), visible->second));
  }
}

// How workers are started and stopped: the script, --module/--no_python/--run_path, torch.
// distributed.launch's local-rank argument, signals and the shutdown timeout.
void read_worker_options(const OptionTexts& o, const agent::Environment& env, Dialect dialect,
                         LaunchConfig& c) {
  c.role = o["role"];
  c.module = o.flag("module");
  c.no_python = o.flag("no_python");
  c.run_path = o.flag("run_path");
  c.virtual_local_rank = o.flag("virtual_local_rank");
  if (c.no_python && c.module && !c.run_path) {  // --run-path takes precedence, as torchrun's
    throw RefusedValue(
        "don't use both the '--no-python' flag and the '--module' flag at the same time");
  }
  if (dialect == Dialect::kDistributedLaunch && !o.flag("use_env")) {
    if (c.no_python) {
      throw RefusedValue(
          "When using the '--no-python' flag, you must also set the '--use-env' flag.");
    }
    c.local_rank_argument = o.flag("legacy_local_rank") ? "--local_rank" : "--local-rank";
  }
  const std::string& start_method = o["start_method"];
  if (start_method != "spawn" && start_method != "fork" && start_method != "forkserver") {
    throw UsageError(fmt::format(
        "argument --start_method: invalid choice '{}' (choose from spawn, fork, forkserver)",
        start_method));
  }
  parse_double(o["monitor_interval"], "--monitor_interval");  // checked; worker exits are events
  try {
    c.signals = agent::parse_signal_list(o["signals_to_handle"]);
  } catch (const std::invalid_argument& e) {
    throw RefusedValue(e.what());  // (any text to argparse; torchrun refuses it later)
  }
  std::string shutdown_timeout = o["shutdown_timeout"];
  if (auto it = env.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
      shutdown_timeout.empty() && it != env.end()) {
    shutdown_timeout = it->second;
  }
  if (!shutdown_timeout.empty()) {
    c.shutdown_timeout = std::chrono::seconds(parse_int(shutdown_timeout, "--shutdown_timeout"));
    if (c.shutdown_timeout.count() < 0) {
      throw UsageError("argument --shutdown_timeout: must not be negative");
    }
  }
  if (c.log_line_prefix_template.empty()) {
    if (auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != env.end()) {
      c.log_line_prefix_template = it->second;
    }
  }
}

// --standalone, and torch 2.14's default for one node with no store port asked for: a c10d store
// on a free port and a random run id (two such jobs on a machine no longer collide).
void apply_single_node_default(OptionTexts& o, const LaunchConfig& c, int max_nodes) {
  const bool static_alone = o["rdzv_backend"] == "static" && o["rdzv_endpoint"].empty() &&
                            o["master_port"].empty() && max_nodes == 1 && c.hosts.empty() &&
                            !c.placement;
  if (!c.standalone && !static_alone) return;
  o.text["rdzv_backend"] = "c10d";
  o.text["rdzv_endpoint"] = "localhost:0";
  o.text["rdzv_id"] = random_run_id();
}

}  // namespace

const std::string& OptionTexts::operator[](const std::string& dest) const {
  static const std::string kNone;
  auto it = text.find(dest);
  return it == text.end() ? kNone : it->second;
}

bool OptionTexts::flag(const std::string& dest) const {
  auto it = flags.find(dest);
  return it != flags.end() && it->second;
}

bool OptionTexts::fill(const std::string& dest, const std::string& value) {
  if (given.contains(dest)) return false;
  text[dest] = value;
  return true;
}

LaunchConfig parse_command_line(const std::vector<std::string>& args, const agent::Environment& env,
                                Dialect dialect) {
  ArgparseResult script;
  OptionTexts o = read_options(args, env, dialect, script);
  if (!o["print_completion"].empty()) {
    throw CompletionRequested{completion_script(o["print_completion"])};
  }
  script.check_complete();
  LaunchConfig c;
  c.training_script = std::move(*script.training_script);
  c.training_script_args = std::move(script.training_script_args);
  c.given = o.given;
  c.standalone = o.flag("standalone");
  c.no_slurm = o.flag("no_slurm");
  c.head_control = o.flag("head_control");

  if (!c.no_slurm) apply_scheduler(env, o, c);
  // A head resolves nothing of its hosts' GPUs: each host's agent counts its own.
  const bool head_launch = !o["hostfile"].empty() || !o["hosts"].empty();
  c.nproc_per_node = o["nproc_per_node"];
  RendezvousOptions r;
  std::tie(r.min_nodes, r.max_nodes) = parse_nnodes(o["nnodes"]);
  // (A head checks the text only: each host counts its own CPUs and GPUs.)
  const bool counted_by_hosts =
      head_launch &&
      (c.nproc_per_node == "auto" || c.nproc_per_node == "cpu" || c.nproc_per_node == "gpu");
  r.nproc = counted_by_hosts ? 1 : resolve_nproc(c.nproc_per_node, env, !c.no_slurm);
  r.max_restarts = parse_int(o["max_restarts"], "--max_restarts");
  if (r.max_restarts < 0) throw UsageError("argument --max_restarts: must not be negative");
  r.node_rank = parse_int(o["node_rank"], "--node_rank");
  read_log_options(o, r.nproc, c);
  read_watch_options(o, c);
  read_worker_options(o, env, dialect, c);
  // (Per process, this task's one worker has the scheduler's local rank on the node.)
  if (c.virtual_local_rank) {
    if (c.placement) {
      check_virtual_devices(env, c.placement->local_rank, c.placement->local_rank + 1);
    } else {
      check_virtual_devices(env, 0, r.nproc);
    }
  }
  parse_head_node(o, c);
  apply_single_node_default(o, c, r.max_nodes);
  if (!c.hosts.empty()) r.min_nodes = r.max_nodes = static_cast<int>(c.hosts.size());
  r.backend = o["rdzv_backend"];
  r.endpoint = o["rdzv_endpoint"];
  r.run_id = o["rdzv_id"];
  r.conf = o["rdzv_conf"];
  r.master_addr = o["master_addr"];
  if (!o["master_port"].empty()) r.master_port = parse_port(o["master_port"], "--master_port");
  r.local_addr = o["local_addr"];
  c.rdzv = rendezvous_config(r);
  c.signals_to_handle = o["signals_to_handle"];
  c.dialect = dialect;
  for (const OptionSpec* spec : specs_of(dialect)) {
    if (!o.given.contains(spec->dest)) continue;
    if (!spec->metavar) {
      if (o.flag(spec->dest)) c.as_given.push_back({spec->dest, "", true});
    } else if (spec->repeated) {
      for (const std::string& v : o.lists[spec->dest]) c.as_given.push_back({spec->dest, v});
    } else {
      c.as_given.push_back({spec->dest, o[spec->dest]});
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
  out += "  --version\n      show ddprun's version, commit and store dialects, and exit\n";
  out +=
      "\n`ddprun launch` takes torch.distributed.launch's command line: the options above, and\n";
  for (const OptionSpec& spec : launch_option_table()) out += help_lines(spec);
  out +=
      "\nPython scripts run as $PYTHON_EXEC (default python3) -u [-m] script args.\n\n"
      "Exit status: 0 every worker succeeded; 1 the worker group failed (after the restarts "
      "allowed),\nor a value torchrun refuses after parsing it (--nproc_per_node=gpu without a "
      "GPU); 2 usage error;\n3 the launch itself failed (e.g. the store port is taken); 4 "
      "--health_check failed:\nthis node did not join the job, or left it; 5 the job stopped in a "
      "crash loop\n(--crash_loop_attempts: do not requeue it); 128+N ddprun received "
      "signal N, forwarded it\nto the workers and shut down.\n";
  return out;
}

}  // namespace ddprun::launcher
