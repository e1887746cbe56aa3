#include "ddprun/agent/agent.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "agent_metrics.hpp"
#include "bounded_command.hpp"
#include "ddprun/agent/console.hpp"
#include "ddprun/agent/containment.hpp"
#include "ddprun/agent/event_log.hpp"
#include "ddprun/agent/failure_json.hpp"
#include "ddprun/agent/file_timer.hpp"
#include "ddprun/agent/gpu_health.hpp"
#include "ddprun/agent/python_template.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/agent/warm_interpreter.hpp"
#include "ddprun/agent/worker_env.hpp"
#include "ddprun/agent/worker_group.hpp"
#include "ddprun/agent/worker_stacks.hpp"
#include "ddprun/rendezvous/local_address.hpp"
#include "ddprun/rendezvous/metrics_server.hpp"
#include "filtered_log.hpp"
#include "head_control.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// How long a restart waits for the GPU memory of the workers that ended to be released.
constexpr auto kGpuMemoryWait = std::chrono::seconds(10);

std::string make_temp_dir(const std::string& templ) {
  std::string buf = templ;
  if (::mkdtemp(buf.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + templ);
  }
  return buf;
}

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

// The stream plan of one standard stream of one worker: tee beats redirect beats the console
// filter.
StreamTarget plan_stream(bool tee, bool redirect, bool on_console, bool watched,
                         const fs::path& file, TeeTarget& tee_target, int console_fd,
                         const std::shared_ptr<FilteredLog>& duplicate) {
  if (tee) {
    tee_target = {file.string(), on_console ? console_fd : -1, on_console ? duplicate : nullptr};
    return {StreamTarget::Kind::kPipe, {}};
  }
  if (watched) {
    // Hang detection reads the output as progress: through the agent, to where it would go.
    tee_target = {redirect ? file.string() : std::string(),
                  !redirect && on_console ? console_fd : -1, nullptr, true};
    return {StreamTarget::Kind::kPipe, {}};
  }
  if (redirect) return {StreamTarget::Kind::kFile, file.string()};
  if (!on_console) return {StreamTarget::Kind::kDevNull, {}};
  return {};
}

// --duplicate_std{out,err}_filters: the attempt's file of matching teed lines, or null.
std::shared_ptr<FilteredLog> filtered_log(const fs::path& attempt_dir, const char* name,
                                          const std::vector<std::string>& needles) {
  if (needles.empty()) return nullptr;
  return std::make_shared<FilteredLog>((attempt_dir / name).string(), needles);
}

std::vector<WorkerLaunch> plan_round(const AgentConfig& cfg, const fs::path& attempt_dir,
                                     const rendezvous::Round& round,
                                     const rendezvous::WorkerStoreAddress& master,
                                     const std::map<int, CpuSet>& bindings) {
  AttemptEnvironment attempt;
  attempt.role = cfg.role;
  attempt.master_addr = master.addr;
  attempt.master_port = master.port;
  attempt.restart_count = round.restart_count;
  attempt.max_restarts = cfg.max_restarts;
  attempt.run_id = cfg.run_id;
  attempt.virtual_local_rank = cfg.virtual_local_rank;

  fs::create_directories(attempt_dir);
  const std::string hostname = cfg.log_line_prefix_template.empty() ? "" : rendezvous::host_name();
  const auto dup_out =
      filtered_log(attempt_dir, "filtered_stdout.log", cfg.duplicate_stdout_filters);
  const auto dup_err =
      filtered_log(attempt_dir, "filtered_stderr.log", cfg.duplicate_stderr_filters);
  std::vector<WorkerLaunch> launches(cfg.nproc);
  for (int r = 0; r < cfg.nproc; ++r) {
    WorkerLaunch& l = launches[r];
    const int rank = round.base_rank + r;
    l.id = WorkerIdentity{r,
                          rank,
                          round.world_size,
                          cfg.nproc,
                          round.node_rank,
                          round.num_nodes,
                          rank,
                          round.world_size};
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
    l.spawn.out = plan_stream(includes_out(cfg.tee[r]), includes_out(cfg.redirects[r]), on_console,
                              watched, dir / "stdout.log", l.tee_out, STDOUT_FILENO, dup_out);
    l.spawn.err = plan_stream(includes_err(cfg.tee[r]), includes_err(cfg.redirects[r]), on_console,
                              watched, dir / "stderr.log", l.tee_err, STDERR_FILENO, dup_err);
  }
  return launches;
}

// --numa-binding: the CPUs of each local rank's worker, from its accelerator (the one whose index
// is its local rank). Throws std::runtime_error naming the mode and torch's reason.
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
      for (int r = 0; r < cfg.nproc; ++r) local_ranks.push_back(r);
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

nlohmann::json job_end_fields(const AgentOutcome& o) {
  switch (o.state) {
    case AgentOutcome::State::kSucceeded:
      return {{"state", "succeeded"}};
    case AgentOutcome::State::kFailed:
      return {{"state", "failed"}, {"summary", o.summary}};
    case AgentOutcome::State::kSignaled:
      return {{"state", "signaled"}, {"signal", signal_name(o.signal)}};
    case AgentOutcome::State::kUnhealthy:
      return {{"state", "unhealthy"}, {"reason", o.summary}};
    case AgentOutcome::State::kLaunchError:
      break;
  }
  return {{"state", "launch_error"}, {"reason", o.summary}};
}

struct Run {
  const AgentConfig& cfg;
  fs::path run_dir;
  std::shared_ptr<rendezvous::Rendezvous> rdzv;
  WorkerGroup& group;
  int& signaled;
  bool& peer_stopped;  // the group is stopping with a signal a peer announced
  asio::any_io_executor ex;
  EventLog& events;
  const std::map<int, CpuSet>& bindings;  // --numa-binding: local rank -> its CPUs
  asio::io_context& io;
  Containment& containment;
  const Nvml* nvml;                     // null: no GPU to check
  bool checked_for_next_round = false;  // the health check ran just before joining

  // --health_check, before this node takes part in a round: nullopt when it passes (or there is
  // none), else the outcome of a node that stays out.
  asio::awaitable<std::optional<AgentOutcome>> unhealthy() {
    std::optional<std::string> why;
    if (nvml != nullptr) {
      const std::string problem = gpu_health_problem(nvml->read(), gpu_device_nodes());
      if (!problem.empty()) why = "GPUs: " + problem;
    }
    if (!why && !cfg.health_check.empty()) {
      why =
          co_await run_bounded_command(io, containment, cfg.health_check, cfg.health_check_timeout,
                                       cfg.env, (run_dir / "health_check.log").string());
    }
    if (!why) co_return std::nullopt;
    spdlog::error("health check failed ({}): this node stays out of the job", *why);
    nlohmann::json fields;
    fields["reason"] = *why;
    events.record("health_check_failed", std::move(fields));
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    out.state = AgentOutcome::State::kUnhealthy;
    out.summary = "the health check failed (" + *why + ")";
    co_return out;
  }

  // Before workers start again on this node's GPUs: waits (bounded) until none of `pids`, the
  // workers that ended, still holds GPU memory, which the driver releases after they exit.
  asio::awaitable<void> gpu_memory_released(const std::vector<int>& pids) {
    if (nvml == nullptr || pids.empty()) co_return;
    const auto deadline = std::chrono::steady_clock::now() + kGpuMemoryWait;
    asio::steady_timer tick(io);
    for (;;) {
      const std::vector<int> held = still_on_gpus(nvml->read(), pids);
      if (held.empty()) co_return;
      if (std::chrono::steady_clock::now() >= deadline) {
        spdlog::warn("GPU memory of ended worker(s) {} not released after {} s; going on",
                     fmt::join(held, ", "),
                     std::chrono::duration_cast<std::chrono::seconds>(kGpuMemoryWait).count());
        co_return;
      }
      tick.expires_after(std::chrono::milliseconds(100));
      co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  // Runs one round of the local group while the rendezvous watches for a reason to end it from
  // outside (another node failed, left or joined); such a reason stops the workers. Returns the
  // group's result and that reason, if one came first. The watcher may outlive this call: what it
  // shares lives on the heap, and it keeps the rendezvous alive.
  //
  // Arguments are references to the caller's named objects, never temporaries: g++ 12 destroyed a
  // temporary argument of a co_await'ed call twice (a shared_ptr released twice: use-after-free).
  asio::awaitable<std::pair<GroupResult, std::string>> run_watched(
      std::vector<WorkerLaunch>& launches, const rendezvous::Round& round) {
    struct Watch {
      bool group_done = false;
      std::string why;
    };
    auto watch = std::make_shared<Watch>();
    asio::co_spawn(
        ex,
        [watch, rdzv = rdzv, round, &group = group, &events = events, &signaled = signaled,
         &peer_stopped = peer_stopped]() mutable -> asio::awaitable<void> {
          std::string why;
          try {
            why = co_await rdzv->interruption(round);
          } catch (const std::exception& e) {
            why = e.what();
          }
          if (const int s = rdzv->peer_stop_signal(); s != 0) {
            // The job is being stopped by a signal that reached another node first: this node's
            // workers get the same signal, as if it had reached this agent (unless it already
            // has: then they are stopping with it).
            if (signaled == 0 && !watch->group_done) {
              spdlog::warn("{}: forwarding {} to the workers and shutting down", why,
                           signal_name(s));
              events.record("signal", {{"signal", signal_name(s)}, {"from", why}});
              signaled = s;
              peer_stopped = true;
              group.stop(s);
            }
            co_return;
          }
          if (!watch->group_done && !why.empty()) {
            spdlog::warn("stopping this node's workers: {}", why);
            events.record("workers_interrupted", {{"reason", why}});
            watch->why = why;
            if (rdzv->peer_hang(round)) {
              group.interrupt_for_stacks();
            } else {
              group.interrupt();
            }
          }
        },
        asio::detached);
    WorkerGroup::HangCoordinator hangs;
    if (round.num_nodes > 1) {
      hangs.announce = [this, round](std::function<void()> then) {
        asio::co_spawn(
            ex,
            [rdzv = rdzv, round, then]() -> asio::awaitable<void> {
              co_await rdzv->announce_hang(round);
              then();
            },
            asio::detached);
      };
      hangs.frozen = [this, round](std::function<void()> then) {
        asio::co_spawn(
            ex,
            [rdzv = rdzv, round, then]() -> asio::awaitable<void> {
              co_await rdzv->hang_frozen(round, std::chrono::seconds(3));
              then();
            },
            asio::detached);
      };
    }
    group.coordinate_hangs_with(hangs);
    GroupResult r = co_await group.run(std::move(launches));
    watch->group_done = true;
    rdzv->stop_waiting();
    co_return std::pair{std::move(r), watch->why};
  }

  // After a hang anywhere in the round: every node's ranks grouped by their innermost frames,
  // logged here as on every node, and in this node's hung workers' failures (the summary).
  asio::awaitable<void> summarise_hang(const rendezvous::Round& round, GroupResult& r) {
    std::map<int, std::string> frames = r.frames;
    if (round.num_nodes > 1) {
      // Each node collects its stacks within its stack-dump limit and its shutdown timeout.
      const auto wait = cfg.shutdown_timeout + std::chrono::seconds(5);
      for (const std::string& text :
           co_await rdzv->share_hang_frames(round, frames_to_text(r.frames), wait)) {
        frames.merge(frames_from_text(text));
      }
    }
    if (frames.empty()) co_return;
    const std::string grouped = ranks_by_frame(frames);
    spdlog::error("hang: every rank's innermost frame: {}", grouped);
    for (auto& f : r.failures) {
      if (!f.ended_because.empty()) f.ended_because += "\nevery rank's innermost frame: " + grouped;
    }
  }

  asio::awaitable<AgentOutcome> run() {
    std::exception_ptr error;
    AgentOutcome out;
    bool joined = false;
    try {
      if (std::optional<AgentOutcome> sick = co_await unhealthy()) {
        out = std::move(*sick);
      } else {
        checked_for_next_round = true;
        joined = true;
        co_await rdzv->join();
        out = co_await rounds();
      }
    } catch (...) {
      error = std::current_exception();
    }
    if (error && signaled != 0) {  // the signal ended a wait in the rendezvous
      error = nullptr;
      out.run_log_dir = run_dir.string();
      out.state = AgentOutcome::State::kSignaled;
      out.signal = signaled;
    }
    if (joined) co_await rdzv->leave(!error && out.state != AgentOutcome::State::kSignaled);
    if (error) std::rethrow_exception(error);
    co_return out;
  }

  // The one round loop, whatever the backend.
  asio::awaitable<AgentOutcome> rounds() {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    std::string interrupted_by;  // why the last round was stopped from outside, if it was
    int last_restart_count = 0;
    std::optional<int> own_failure;  // this node's first failed worker's exit code, last round
    for (;;) {
      if (signaled != 0) {
        out.state = AgentOutcome::State::kSignaled;
        out.signal = signaled;
        co_return out;
      }
      if (!std::exchange(checked_for_next_round, false)) {
        if (std::optional<AgentOutcome> sick = co_await unhealthy()) co_return std::move(*sick);
      }
      const std::optional<rendezvous::Round> round = co_await rdzv->next_round();
      if (!round && rdzv->peer_stop_signal() != 0) {  // stopped with a peer, by its signal
        if (signaled == 0) signaled = rdzv->peer_stop_signal();
        out.state = AgentOutcome::State::kSignaled;
        out.signal = signaled;
        co_return out;
      }
      if (!round) {
        AgentOutcome ended = co_await job_ended(interrupted_by);
        if (ended.state == AgentOutcome::State::kFailed) ended.own_worker_exitcode = own_failure;
        co_return ended;
      }
      own_failure.reset();
      if (round->restart_count > last_restart_count) {
        spdlog::warn("restarting the workers (restart {} of at most {})", round->restart_count,
                     cfg.max_restarts);
        events.record("restart", {{"restart_count", round->restart_count},
                                  {"max_restarts", cfg.max_restarts}});
        last_restart_count = round->restart_count;
      }
      events.record("round_formed", {{"round", round->number},
                                     {"restart_count", round->restart_count},
                                     {"node_rank", round->node_rank},
                                     {"num_nodes", round->num_nodes},
                                     {"base_rank", round->base_rank},
                                     {"world_size", round->world_size},
                                     {"members", round->members}});
      if (round->num_nodes > 1 || cfg.rdzv.max_nodes > 1) {
        spdlog::info("round {}: node {} of {}, ranks {}-{} of {}", round->number, round->node_rank,
                     round->num_nodes, round->base_rank, round->base_rank + cfg.nproc - 1,
                     round->world_size);
      }
      const std::optional<rendezvous::WorkerStoreAddress> master =
          co_await rdzv->worker_store(*round);
      if (!master) {  // the round ended before its store was known: no worker starts in it
        const std::string why = co_await rdzv->interruption(*round);
        spdlog::warn("round {} ended before its workers started: {}", round->number, why);
        events.record("round_ended_before_start", {{"round", round->number}, {"reason", why}});
        interrupted_by = why;
        co_await rdzv->end_round(*round);
        continue;
      }
      const fs::path attempt_dir = run_dir / fmt::format("attempt_{}", round->restart_count);
      fs::remove_all(attempt_dir);
      std::vector<WorkerLaunch> launches = plan_round(cfg, attempt_dir, *round, *master, bindings);
      auto [r, why] = co_await run_watched(launches, *round);
      if (!why.empty()) interrupted_by = why;
      if (!r.stacks.empty()) {
        const fs::path stacks = attempt_dir / "hang_stacks.log";
        std::ofstream(stacks) << r.stacks;
        spdlog::error("hang: every rank's stack is in {}", stacks.string());
      }
      if (r.hang || rdzv->peer_hang(*round)) co_await summarise_hang(*round, r);
      if (r.state == GroupResult::State::kFailed || r.state == GroupResult::State::kInterrupted) {
        co_await gpu_memory_released(r.pids);
      }
      switch (r.state) {
        case GroupResult::State::kSucceeded: {
          const bool passed = co_await rdzv->exit_barrier(*round);
          events.record("exit_barrier", {{"round", round->number}, {"passed", passed}});
          if (passed) {
            co_await rdzv->close("succeeded");
            out.state = AgentOutcome::State::kSucceeded;
            co_return out;
          }
          spdlog::warn("another node failed or left while this one waited at the exit barrier");
          co_await rdzv->end_round(*round);  // (a no-op when the peer's failure already ended it)
          break;
        }
        case GroupResult::State::kStopped:
          out.state = AgentOutcome::State::kSignaled;
          out.signal = r.stop_signal;
          co_return out;
        case GroupResult::State::kFailed:
          if (!r.failures.empty()) own_failure = r.failures.front().exitcode;
          co_await rdzv->report_failure(*round, failures_to_json(r.failures));
          break;
        case GroupResult::State::kInterrupted:
          co_await rdzv->end_round(*round);
          break;
        case GroupResult::State::kUnhealthy:
          // No restart here (a fresh worker would meet what holds the stuck one): the node
          // leaves, and the job goes on without it where it can.
          out.state = AgentOutcome::State::kUnhealthy;
          out.summary = r.unhealthy;
          co_return out;
      }
    }
  }

  asio::awaitable<AgentOutcome> job_ended(const std::string& interrupted_by) {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    const rendezvous::JobEnd& end = rdzv->ending();
    switch (end.kind) {
      case rendezvous::JobEnd::Kind::kSucceeded:
        out.state = AgentOutcome::State::kSucceeded;
        break;
      case rendezvous::JobEnd::Kind::kClosed:
        out.state = AgentOutcome::State::kLaunchError;
        out.summary = fmt::format("the job '{}' has already ended ({}); this node takes no part",
                                  cfg.run_id, end.why);
        break;
      case rendezvous::JobEnd::Kind::kRestartsExhausted: {
        // Every node prints the same summary: all nodes' failures of the round that spent the
        // last restart.
        std::vector<WorkerFailure> failures;
        for (const auto& text : co_await rdzv->final_failures()) {
          for (auto& f : failures_from_json(text)) failures.push_back(std::move(f));
        }
        out.summary =
            failures.empty()
                ? fmt::format("{} FAILED: {}, and no restarts remain\n", cfg.entrypoint_name,
                              interrupted_by.empty() ? "the job failed" : interrupted_by)
                : format_failure_summary(cfg.entrypoint_name, rendezvous::host_name(), failures);
        out.state = AgentOutcome::State::kFailed;
        break;
      }
    }
    co_return out;
  }
};

}  // namespace

AgentOutcome run_agent(const AgentConfig& cfg) {
  asio::io_context io(1);
  AgentOutcome outcome;
  fs::path run_dir;
  rendezvous::RendezvousConfig rdzv_config = cfg.rdzv;
  rdzv_config.run_id = cfg.run_id;
  rdzv_config.nproc = cfg.nproc;
  rdzv_config.max_restarts = cfg.max_restarts;
  rdzv_config.host = rendezvous::host_name();
  std::shared_ptr<rendezvous::Rendezvous> rdzv;
  std::map<int, CpuSet> bindings;
  try {
    const std::string base =
        cfg.log_dir.empty() ? make_temp_dir("/tmp/torchelastic_XXXXXX") : cfg.log_dir;
    fs::create_directories(base);
    run_dir = make_temp_dir((fs::path(base) / (cfg.run_id + "_XXXXXX")).string());
    bindings = numa_bindings(cfg);
    rdzv = rendezvous::make_rendezvous(io, rdzv_config);
  } catch (const std::exception& e) {
    outcome.state = AgentOutcome::State::kLaunchError;
    outcome.summary = e.what();
    return outcome;
  }
  // DDPRUN_CGROUPS=0: workers in process groups only (where something else manages cgroups).
  const char* cgroups = std::getenv("DDPRUN_CGROUPS");
  Containment containment(io, cgroups == nullptr || std::string_view(cgroups) != "0");
  WorkerGroup group(io, cfg.shutdown_timeout, containment);
  std::unique_ptr<EventLog> events;
  try {
    events = std::make_unique<EventLog>(cfg.event_log, cfg.events_to_console ? STDERR_FILENO : -1,
                                        rendezvous::host_name(), cfg.run_id);
  } catch (const std::exception& e) {
    outcome.state = AgentOutcome::State::kLaunchError;
    outcome.summary = e.what();
    return outcome;
  }
  AgentMetrics metrics(cfg.max_restarts);
  std::unique_ptr<rendezvous::MetricsServer> metrics_server;
  if (cfg.metrics_port) {
    events->set_observer(
        [&metrics](const std::string& e, const nlohmann::json& f) { metrics.consume(e, f); });
    try {
      metrics_server = std::make_unique<rendezvous::MetricsServer>(
          io, static_cast<uint16_t>(*cfg.metrics_port), [&metrics] { return metrics.render(); });
    } catch (const std::exception& e) {
      outcome.state = AgentOutcome::State::kLaunchError;
      outcome.summary = e.what();
      return outcome;
    }
    spdlog::info("metrics at http://*:{}/metrics", metrics_server->port());
  }
  group.set_event_log(events.get());
  group.watch_uninterruptible(cfg.uninterruptible_timeout);
  // Heartbeat files are mapped by the workers: in memory (/dev/shm) where there is one, never on
  // a shared log folder.
  std::string heartbeat_dir;
  if (cfg.hang.mode != HangPolicy::Mode::kOff) {
    try {
      heartbeat_dir = make_temp_dir(fs::exists("/dev/shm") ? "/dev/shm/ddprun-heartbeats-XXXXXX"
                                                           : "/tmp/ddprun-heartbeats-XXXXXX");
    } catch (const std::exception& e) {
      outcome.state = AgentOutcome::State::kLaunchError;
      outcome.summary = e.what();
      return outcome;
    }
    group.watch_hangs(cfg.hang, heartbeat_dir);
    group.capture_python_stacks(cfg.python_workers);
    group.capture_native_stacks(cfg.native_debugger);
  }
  std::unique_ptr<WarmInterpreter> warm;  // --preload, for Python workers only
  if (!cfg.preload.modules.empty() && cfg.python_workers) {
    warm = std::make_unique<WarmInterpreter>(io, containment, cfg.entrypoint, cfg.preload);
    group.start_workers_from(warm.get(), worker_environment(cfg.env, {}, {}, std::string()));
  }
  std::unique_ptr<FileTimerServer> timers;
  if (!cfg.timer_file.empty()) {
    try {
      timers = std::make_unique<FileTimerServer>(
          io, cfg.timer_file, [&group](int pid) { return group.runs(pid); },
          [&group](const ExpiredTimer& t) { group.expire_timer(t); },
          [&group](int pid) { group.progress_of(pid); });
    } catch (const std::exception& e) {
      outcome.state = AgentOutcome::State::kLaunchError;
      outcome.summary = e.what();
      return outcome;
    }
  }
  if (!cfg.event_log.empty() || cfg.events_to_console || cfg.metrics_port) {
    // Following every node's presence costs this agent one event per join or leave anywhere in
    // the job: only for an agent that reports them.
    rdzv->watch_membership([&events](const rendezvous::MembershipChange& m) {
      events->record(m.joined ? "node_joined" : "node_left",
                     {{"node_id", m.node}, {"host", m.host}, {"nproc", m.nproc}});
    });
  }
  int signaled = 0;
  bool peer_stopped = false;
  const auto on_signal = [&](int signo) {
    events->record("signal", {{"signal", signal_name(signo)}});
    if (signaled == 0) asio::co_spawn(io, rdzv->announce_stop(signo), asio::detached);
    signaled = signo;
    if (std::exchange(peer_stopped, false) && group.active()) {
      // The workers are already stopping with the job's signal, which a peer passed on first:
      // this one is the same stop arriving here, not a second request to kill at once.
    } else if (group.active()) {
      group.stop(signo);
    } else {
      rdzv->abandon();  // waiting in the rendezvous (or its exit barrier): stop waiting now
    }
  };
  asio::signal_set signals(io);
  for (int s : cfg.signals) signals.add(s);
  std::function<void()> listen = [&] {
    signals.async_wait([&](boost::system::error_code ec, int signo) {
      if (ec) return;
      spdlog::warn("received {}: forwarding it to the workers and shutting down",
                   signal_name(signo));
      on_signal(signo);
      listen();
    });
  };
  listen();
  HeadControl control(io, cfg.control_fd, on_signal);
  // Signals are handled from here on: the first line says so to whoever waits for it.
  spdlog::info("run {}: {}, {} workers here, logs in {}", cfg.run_id, rdzv->describe(), cfg.nproc,
               run_dir.string());

  events->record("agent_started", {{"nproc", cfg.nproc},
                                   {"max_restarts", cfg.max_restarts},
                                   {"rendezvous", rdzv->describe()},
                                   {"log_dir", run_dir.string()}});
  // Where GPUs exist, NVML checks them before each round (no GPU, or no driver: nothing to do).
  const std::unique_ptr<Nvml> nvml = Nvml::open();
  Run run{cfg,     run_dir,  rdzv, group,       signaled,  peer_stopped, io.get_executor(),
          *events, bindings, io,   containment, nvml.get()};
  bool finished = false;
  asio::co_spawn(io, run.run(), [&](std::exception_ptr e, AgentOutcome result) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        outcome.state = AgentOutcome::State::kLaunchError;
        outcome.summary = ex.what();
      }
    } else {
      outcome = std::move(result);
    }
    signals.cancel();
    timers.reset();  // its FIFO's read would keep the io_context busy below
    group.start_workers_from(nullptr, {});
    warm.reset();  // so would its interpreter's exit watch
    control.close();
    containment.stop_listening();
    rdzv->abandon();
    finished = true;
  });
  while (!finished) io.run_one();
  events->record("job_end", job_end_fields(outcome));
  metrics_server.reset();  // its acceptor would keep the io_context busy below
  // Let what is still in flight (coordinator connections closing, the store's last connections)
  // finish on its own: destroying the io_context with coroutines suspended in it would destroy
  // objects from inside their own pending operations. Bounded, in case something never completes.
  io.run_for(std::chrono::seconds(5));
  if (!io.stopped()) spdlog::warn("shutdown: some I/O was still pending after 5 s");
  // What the workers and the agent wrote comes before what the caller prints next (bounded).
  Console::of(STDOUT_FILENO).flush();
  Console::of(STDERR_FILENO).flush();
  if (!heartbeat_dir.empty()) {
    std::error_code ignored;
    fs::remove_all(heartbeat_dir, ignored);
  }
  return outcome;
}

}  // namespace ddprun::agent
