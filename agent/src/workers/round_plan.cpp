#include "workers/round_plan.hpp"

#include <unistd.h>

#include <memory>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/store/local_address.hpp"
#include "logs/filtered_log.hpp"
#include "workers/python_template.hpp"
#include "workers/worker_env.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;

namespace {

// The console prefix of a worker's teed lines (torchrun's TailLog header, or the template).
std::string line_prefix(const AgentConfig& cfg, const WorkerIdentity& id,
                        const std::string& hostname) {
  if (cfg.log_line_prefix_template.empty()) {
    return fmt::format("[{}{}]:", cfg.role, id.local_rank);
  }
  return safe_substitute(cfg.log_line_prefix_template,
                         {{"role_name", cfg.role},
                          {"rank", std::to_string(id.rank)},
                          {"local_rank", std::to_string(id.local_rank)},
                          {"hostname", hostname}});
}

// The worker's command line: every argument after the program gets torchrun's ${local_rank}
// macro substituted (Python's Template rules, so "$$" becomes "$" too).
std::vector<std::string> worker_argv(const std::vector<std::string>& entrypoint, int local_rank) {
  std::vector<std::string> argv;
  argv.reserve(entrypoint.size());
  const std::map<std::string, std::string> vars = {{"local_rank", std::to_string(local_rank)}};
  for (size_t i = 0; i < entrypoint.size(); ++i) {
    argv.push_back(i == 0 ? entrypoint[i] : safe_substitute(entrypoint[i], vars));
  }
  return argv;
}

// Where one standard stream of one worker goes: tee beats redirect beats the console filter.
struct StreamRoute {
  StreamTarget spawn;  // what the worker's descriptor is
  TeeTarget tee;       // with a pipe: where the agent copies it
};

StreamRoute route_stream(bool tee, bool redirect, bool on_console, bool watched,
                         const fs::path& file, int console_fd,
                         const std::shared_ptr<FilteredLog>& duplicate) {
  const StreamTarget pipe{StreamTarget::Kind::kPipe, {}};
  if (tee) {
    return {pipe, {file.string(), on_console ? console_fd : -1, on_console ? duplicate : nullptr}};
  }
  if (watched) {
    // Hang detection reads the output as progress: through the agent, to where it would go.
    return {pipe,
            {redirect ? file.string() : std::string(), !redirect && on_console ? console_fd : -1,
             nullptr, true}};
  }
  if (redirect) return {{StreamTarget::Kind::kFile, file.string()}, {}};
  if (!on_console) return {{StreamTarget::Kind::kDevNull, {}}, {}};
  return {};
}

// --duplicate_std{out,err}_filters: the attempt's file of matching teed lines, or null.
std::shared_ptr<FilteredLog> filtered_log(const fs::path& attempt_dir, const char* name,
                                          const std::vector<std::string>& needles) {
  if (needles.empty()) return nullptr;
  return std::make_shared<FilteredLog>((attempt_dir / name).string(), needles);
}

}  // namespace

std::vector<WorkerLaunch> plan_round(const AgentConfig& cfg, const fs::path& attempt_dir,
                                     const rendezvous::Round& round,
                                     const rendezvous::WorkerStoreAddress& master,
                                     const std::map<int, CpuSet>& bindings,
                                     const std::optional<CheckpointRestore>& checkpoint,
                                     RoleRanks roles) {
  AttemptEnvironment attempt;
  attempt.role = cfg.role;
  attempt.master_addr = master.addr;
  attempt.master_port = master.port;
  attempt.restart_count = round.restart_count;
  attempt.max_restarts = cfg.rdzv.max_restarts;
  attempt.run_id = cfg.rdzv.run_id;
  attempt.virtual_local_rank = cfg.virtual_local_rank;
  attempt.checkpoint_slots = cfg.rdzv.nproc;
  attempt.checkpoint = checkpoint;

  fs::create_directories(attempt_dir);
  const std::string hostname = cfg.log_line_prefix_template.empty() ? "" : store::host_name();
  const auto dup_out =
      filtered_log(attempt_dir, "filtered_stdout.log", cfg.duplicate_stdout_filters);
  const auto dup_err =
      filtered_log(attempt_dir, "filtered_stderr.log", cfg.duplicate_stderr_filters);
  const bool stderr_is_terminal = ::isatty(STDERR_FILENO) == 1;
  std::vector<WorkerLaunch> launches(cfg.rdzv.nproc);
  for (int r = 0; r < cfg.rdzv.nproc; ++r) {
    WorkerLaunch& l = launches[r];
    const int rank = round.base_rank + r;
    l.id = WorkerIdentity{r,
                          rank,
                          round.world_size,
                          cfg.rdzv.nproc,
                          round.node_rank,
                          round.num_nodes,
                          roles.base + r,
                          roles.world};
    if (cfg.placement) {
      l.id.local_rank = cfg.placement->local_rank;
      l.id.local_world_size = cfg.placement->local_world_size;
      l.id.group_rank = cfg.placement->node_rank;
      l.id.group_world_size = cfg.placement->num_nodes;
    }
    const fs::path dir = attempt_dir / std::to_string(r);
    fs::create_directories(dir);
    l.error_file = (dir / "error.json").string();
    l.prefix = line_prefix(cfg, l.id, hostname);
    const bool on_console = !cfg.console_ranks || cfg.console_ranks->contains(r);
    l.spawn.argv = worker_argv(cfg.entrypoint, l.id.local_rank);
    if (auto b = bindings.find(l.id.local_rank); b != bindings.end()) {
      l.spawn.cpus.assign(b->second.begin(), b->second.end());
    }
    l.spawn.env = worker_environment(cfg.env, attempt, l.id, l.error_file);
    const bool watched = cfg.hang.mode != HangPolicy::Mode::kOff;
    const StreamRoute out =
        route_stream(includes_out(cfg.tee[r]), includes_out(cfg.redirects[r]), on_console, watched,
                     dir / "stdout.log", STDOUT_FILENO, dup_out);
    // stderr passes through the agent (as it is written) unless it is a terminal, where a pipe
    // would change what the worker sees: the agent keeps its end, for the failure summary's
    // traceback when the worker writes no error file.
    const StreamRoute err =
        route_stream(includes_err(cfg.tee[r]), includes_err(cfg.redirects[r]), on_console,
                     watched || !stderr_is_terminal, dir / "stderr.log", STDERR_FILENO, dup_err);
    l.spawn.out = out.spawn;
    l.tee_out = out.tee;
    l.spawn.err = err.spawn;
    l.tee_err = err.tee;
  }
  return launches;
}

std::vector<std::pair<int, int>> round_ranks(const AgentConfig& cfg,
                                             const rendezvous::Round& round) {
  std::vector<std::pair<int, int>> out;
  const std::vector<int> locals = local_ranks(cfg);
  for (int r = 0; r < cfg.rdzv.nproc; ++r) out.emplace_back(locals[r], round.base_rank + r);
  return out;
}

std::vector<int> local_ranks(const AgentConfig& cfg) {
  std::vector<int> out;
  for (int r = 0; r < cfg.rdzv.nproc; ++r) {
    out.push_back(cfg.placement ? cfg.placement->local_rank : r);
  }
  return out;
}

std::map<int, CpuSet> numa_bindings(const AgentConfig& cfg) {
  std::map<int, CpuSet> out;
  if (!cfg.numa_binding) return out;
  const std::string mode(numa_mode_name(*cfg.numa_binding));
  try {
    NumaMachine machine;
    machine.device_pci = cuda_device_pci_addresses();
    machine.allowed = current_affinity();
    std::vector<int> local_ranks;
    if (cfg.placement) {
      local_ranks.push_back(cfg.placement->local_rank);
    } else {
      for (int r = 0; r < cfg.rdzv.nproc; ++r) local_ranks.push_back(r);
    }
    for (int r : local_ranks) {
      out[r] = numa_cpus(machine, *cfg.numa_binding, r);
      spdlog::info("--numa-binding={}: local rank {} runs on CPUs {}", mode, r,
                   format_cpu_list(out[r]));
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("--numa-binding={}: {}", mode, e.what()));
  }
  return out;
}

}  // namespace ddprun::agent
