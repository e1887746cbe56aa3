#include "ddprun/agent/agent.hpp"

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "ddprun/agent/elastic_coordinator.hpp"
#include "ddprun/agent/node_coordinator.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/agent/worker_env.hpp"
#include "ddprun/agent/worker_group.hpp"
#include "ddprun/rendezvous/errors.hpp"
#include "ddprun/rendezvous/local_address.hpp"
#include "ddprun/rendezvous/store_server.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

std::string make_temp_dir(const std::string& templ) {
  std::string buf = templ;
  if (::mkdtemp(buf.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + templ);
  }
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE with ${role_name}, ${rank}, ${local_rank}.
std::string line_prefix(const Environment& env, const std::string& role, const WorkerIdentity& id) {
  auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
  std::string out = it != env.end() ? it->second : "[${role_name}${local_rank}]:";
  const std::pair<std::string, std::string> vars[] = {
      {"${role_name}", role},
      {"${rank}", std::to_string(id.rank)},
      {"${local_rank}", std::to_string(id.local_rank)}};
  for (const auto& [name, value] : vars) {
    for (size_t pos; (pos = out.find(name)) != std::string::npos;)
      out.replace(pos, name.size(), value);
  }
  return out;
}

// The stream plan of one standard stream of one worker: tee beats redirect beats the console
// filter.
StreamTarget plan_stream(bool tee, bool redirect, bool on_console, const fs::path& file,
                         TeeTarget& tee_target, int console_fd) {
  if (tee) {
    tee_target = {file.string(), on_console ? console_fd : -1};
    return {StreamTarget::Kind::kPipe, {}};
  }
  if (redirect) return {StreamTarget::Kind::kFile, file.string()};
  if (!on_console) return {StreamTarget::Kind::kDevNull, {}};
  return {};
}

std::vector<WorkerLaunch> plan_attempt(const AgentConfig& cfg, const fs::path& attempt_dir,
                                       const NodePlacement& place, int master_port) {
  const int restart = place.attempt;
  AttemptEnvironment attempt;
  attempt.role = cfg.role;
  attempt.master_addr = cfg.master_addr;
  attempt.master_port = master_port;
  attempt.restart_count = restart;
  attempt.max_restarts = cfg.max_restarts;
  attempt.run_id = cfg.run_id;
  attempt.virtual_local_rank = cfg.virtual_local_rank;

  std::vector<WorkerLaunch> launches(cfg.nproc);
  for (int r = 0; r < cfg.nproc; ++r) {
    WorkerLaunch& l = launches[r];
    const int rank = place.base_rank + r;
    l.id = WorkerIdentity{
        r, rank, place.world_size, cfg.nproc, cfg.node_rank, cfg.num_nodes, rank, place.world_size};
    const fs::path dir = attempt_dir / std::to_string(r);
    fs::create_directories(dir);
    l.error_file = (dir / "error.json").string();
    l.prefix = line_prefix(cfg.env, cfg.role, l.id);
    const bool on_console = !cfg.console_ranks || cfg.console_ranks->contains(r);
    l.spawn.argv = cfg.entrypoint;
    l.spawn.env = worker_environment(cfg.env, attempt, l.id, l.error_file);
    l.spawn.out = plan_stream(includes_out(cfg.tee[r]), includes_out(cfg.redirects[r]), on_console,
                              dir / "stdout.log", l.tee_out, STDOUT_FILENO);
    l.spawn.err = plan_stream(includes_err(cfg.tee[r]), includes_err(cfg.redirects[r]), on_console,
                              dir / "stderr.log", l.tee_err, STDERR_FILENO);
  }
  return launches;
}

struct Run {
  const AgentConfig& cfg;
  fs::path run_dir;
  rendezvous::StoreServer* store;  // null on nodes other than node 0 of a multi-node job
  WorkerGroup& group;
  int& signaled;
  asio::any_io_executor ex;

  // Runs one attempt of the local group while `event` (a coordinator's wait for a reason to stop:
  // another node failed, left or joined) watches; an event stops the workers for the restart.
  // Returns the group's result and the event's reason, if one came first. The watcher may outlive
  // this call: what it shares lives on the heap, and it keeps `session` (which `event` runs on)
  // alive.
  //
  // Arguments are references to the caller's named objects, never temporaries: g++ 12 destroyed a
  // temporary argument of a co_await'ed call twice (a shared_ptr released twice: use-after-free).
  asio::awaitable<std::pair<GroupResult, std::string>> run_watched(
      std::vector<WorkerLaunch>& launches, asio::awaitable<std::string>& event,
      const std::shared_ptr<JobSession>& session) {
    struct Watch {
      bool group_done = false;
      std::string why;
    };
    auto watch = std::make_shared<Watch>();
    asio::co_spawn(
        ex,
        [watch, session, event = std::move(event),
         &group = group]() mutable -> asio::awaitable<void> {
          std::string why;
          try {
            why = co_await std::move(event);
          } catch (const std::exception& e) {
            why = e.what();
          }
          if (!watch->group_done && !why.empty()) {
            spdlog::warn("stopping this node's workers: {}", why);
            watch->why = why;
            group.interrupt();
          }
        },
        asio::detached);
    GroupResult r = co_await group.run(std::move(launches));
    watch->group_done = true;
    session->stop_waiting();
    co_return std::pair{std::move(r), watch->why};
  }

  asio::awaitable<AgentOutcome> run() {
    if (cfg.elastic) return elastic();
    return cfg.num_nodes > 1 ? multi_node() : attempts();
  }

  // Elastic: rounds of a changing set of nodes (elastic_coordinator.hpp).
  asio::awaitable<AgentOutcome> elastic() {
    ElasticSpec spec;
    spec.session = SessionSpec{cfg.run_id, cfg.rdzv_host, cfg.rdzv_port, cfg.join_timeout,
                               cfg.heartbeat_timeout};
    spec.node_id = fmt::format("{}_{}_{:x}", host_name(), ::getpid(), std::random_device{}());
    spec.min_nodes = cfg.min_nodes;
    spec.max_nodes = cfg.max_nodes;
    spec.nproc = cfg.nproc;
    spec.host = host_name();
    spec.last_call_timeout = cfg.last_call_timeout;
    spec.barrier_timeout = cfg.exit_barrier_timeout;
    std::shared_ptr<ElasticCoordinator> coord = co_await ElasticCoordinator::join(ex, spec);
    AgentOutcome out;
    try {
      out = co_await elastic_rounds(coord);
    } catch (...) {
      coord->leave();
      throw;
    }
    if (store != nullptr && out.state != AgentOutcome::State::kSignaled) {
      try {  // the store lives in this agent: it stays until the others have read the outcome
        co_await coord->outlast_peers(
            std::min<std::chrono::milliseconds>(cfg.join_timeout, std::chrono::seconds(30)));
      } catch (const std::exception&) {
      }
    }
    coord->leave();
    co_return out;
  }

  // The restart budget is spent: every node prints the failures of the round that spent it.
  asio::awaitable<AgentOutcome> job_failed(std::shared_ptr<ElasticCoordinator> coord,
                                           const std::string& interrupted_by) {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    const auto failures = co_await coord->failures(cfg.max_restarts);
    out.summary = failures.empty()
                      ? fmt::format("{} FAILED: {}, and no restarts remain\n", cfg.entrypoint_name,
                                    interrupted_by.empty() ? "the job failed" : interrupted_by)
                      : format_failure_summary(cfg.entrypoint_name, host_name(), failures);
    out.state = AgentOutcome::State::kFailed;
    co_return out;
  }

  asio::awaitable<AgentOutcome> elastic_rounds(std::shared_ptr<ElasticCoordinator> coord) {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    std::string interrupted_by;
    bool ran = false;
    for (;;) {
      if (signaled != 0) {
        out.state = AgentOutcome::State::kSignaled;
        out.signal = signaled;
        co_return out;
      }
      if (coord->restarts() > cfg.max_restarts) {
        if (!coord->closed()) co_await coord->close("failed");
        co_return co_await job_failed(coord, interrupted_by);
      }
      const std::optional<ElasticRound> round = co_await coord->next_round();
      if (!round) {
        const std::string why = coord->closed().value_or("closed");
        if (ran && why == "succeeded") {
          out.state = AgentOutcome::State::kSucceeded;
        } else if (why == "failed") {
          co_return co_await job_failed(coord, interrupted_by);
        } else {
          out.state = AgentOutcome::State::kLaunchError;
          out.summary = fmt::format("the job '{}' has already ended ({}); this node takes no part",
                                    cfg.run_id, why);
        }
        co_return out;
      }
      spdlog::info("round {}: node {} of {}, ranks {}-{} of {}", round->number, round->node_rank,
                   round->num_nodes, round->base_rank, round->base_rank + cfg.nproc - 1,
                   round->world_size);
      // Every round gets a fresh worker store on a live node: no stale MASTER_ADDR, no stale keys.
      std::unique_ptr<rendezvous::StoreServer> worker_store;
      if (round->node_rank == 0) {
        worker_store = std::make_unique<rendezvous::StoreServer>(
            static_cast<asio::io_context&>(ex.context()), rendezvous::ServerOptions{});
        const std::string addr =
            cfg.local_addr.empty() ? rendezvous::local_address_towards(cfg.rdzv_host, cfg.rdzv_port)
                                   : cfg.local_addr;
        co_await coord->publish_master(*round, addr, worker_store->port());
      }
      const auto [master_addr, master_port] = co_await coord->master(*round);
      const fs::path attempt_dir = run_dir / fmt::format("attempt_{}", round->restarts);
      fs::remove_all(attempt_dir);
      const NodePlacement place{round->restarts, round->base_rank, round->world_size};
      AgentConfig round_cfg = cfg;
      round_cfg.node_rank = round->node_rank;
      round_cfg.num_nodes = round->num_nodes;
      round_cfg.master_addr = master_addr;
      ran = true;
      std::vector<WorkerLaunch> launches = plan_attempt(round_cfg, attempt_dir, place, master_port);
      asio::awaitable<std::string> event = coord->membership_event(*round);
      const std::shared_ptr<JobSession> session = coord;
      auto [r, why] = co_await run_watched(launches, event, session);
      if (!why.empty()) interrupted_by = why;
      switch (r.state) {
        case GroupResult::State::kSucceeded:
          if (co_await coord->exit_barrier(*round)) {
            co_await coord->close("succeeded");
            out.state = AgentOutcome::State::kSucceeded;
            co_return out;
          }
          spdlog::warn("another node failed while this one waited at the exit barrier");
          break;
        case GroupResult::State::kStopped:
          out.state = AgentOutcome::State::kSignaled;
          out.signal = r.stop_signal;
          co_return out;
        case GroupResult::State::kFailed:
          co_await coord->report_failure(*round, r.failures);
          break;
        case GroupResult::State::kInterrupted:
          co_await coord->end_round(*round, false);  // membership changed: not a restart
          break;
      }
    }
  }

  // Multi-node: attempts are job-wide, agreed through the store (node_coordinator.hpp).
  asio::awaitable<AgentOutcome> multi_node() {
    std::shared_ptr<NodeCoordinator> coord = co_await join();
    AgentOutcome out;
    try {
      out = co_await multi_node_attempts(coord);
    } catch (...) {
      coord->leave();
      throw;
    }
    // The store lives in node 0's agent: it stays until the others have read the outcome.
    if (cfg.node_rank == 0 && out.state != AgentOutcome::State::kSignaled) {
      try {
        co_await coord->outlast_peers(
            std::min<std::chrono::milliseconds>(cfg.join_timeout, std::chrono::seconds(30)));
      } catch (const std::exception&) {
      }
    }
    coord->leave();
    co_return out;
  }

  asio::awaitable<std::shared_ptr<NodeCoordinator>> join() {
    NodeSpec spec;
    spec.run_id = cfg.run_id;
    spec.node_rank = cfg.node_rank;
    spec.num_nodes = cfg.num_nodes;
    spec.nproc = cfg.nproc;
    spec.host = host_name();
    spec.store_host = cfg.master_addr;
    spec.store_port = cfg.store_port;
    spec.join_timeout = cfg.join_timeout;
    spec.heartbeat_timeout = cfg.heartbeat_timeout;
    spec.barrier_timeout = cfg.exit_barrier_timeout;
    co_return co_await NodeCoordinator::join(ex, spec);
  }

  asio::awaitable<AgentOutcome> multi_node_attempts(std::shared_ptr<NodeCoordinator> coord) {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    std::string interrupted_by;  // why the last attempt was stopped from outside, if it was
    for (;;) {
      if (signaled != 0) {
        out.state = AgentOutcome::State::kSignaled;
        out.signal = signaled;
        co_return out;
      }
      // The budget is checked before waiting for the nodes: those that failed may have left.
      if (const int attempt = coord->attempt(); attempt > cfg.max_restarts) {
        // Every node prints the same summary: all nodes' failures of the last attempt.
        const auto failures = co_await coord->failures(attempt - 1);
        out.summary = failures.empty()
                          ? fmt::format("{} FAILED: {}, and no restarts remain\n",
                                        cfg.entrypoint_name, interrupted_by)
                          : format_failure_summary(cfg.entrypoint_name, host_name(), failures);
        out.state = AgentOutcome::State::kFailed;
        co_return out;
      }
      const NodePlacement place = co_await coord->placement();
      if (place.attempt > 0) {
        spdlog::warn("job restarts: attempt {} of at most {} restarts", place.attempt,
                     cfg.max_restarts);
      }
      const fs::path attempt_dir = run_dir / fmt::format("attempt_{}", place.attempt);
      fs::remove_all(attempt_dir);
      std::vector<WorkerLaunch> launches = plan_attempt(cfg, attempt_dir, place, cfg.store_port);
      asio::awaitable<std::string> event = coord->peer_event(place.attempt);
      const std::shared_ptr<JobSession> session = coord;
      auto [r, why] = co_await run_watched(launches, event, session);
      if (!why.empty()) interrupted_by = why;
      switch (r.state) {
        case GroupResult::State::kSucceeded:
          if (co_await coord->exit_barrier(place.attempt)) {
            out.state = AgentOutcome::State::kSucceeded;
            co_return out;
          }
          spdlog::warn("another node failed while this one waited at the exit barrier");
          break;
        case GroupResult::State::kStopped:
          out.state = AgentOutcome::State::kSignaled;
          out.signal = r.stop_signal;
          co_return out;
        case GroupResult::State::kFailed:
          co_await coord->report_failure(place.attempt, r.failures);
          break;
        case GroupResult::State::kInterrupted:
          co_await coord->advance(place.attempt);  // a node left: that costs the job a restart
          break;
      }
    }
  }

  asio::awaitable<AgentOutcome> attempts() {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    for (int restart = 0;; ++restart) {
      if (signaled != 0) {
        out.state = AgentOutcome::State::kSignaled;
        out.signal = signaled;
        co_return out;
      }
      const fs::path attempt_dir = run_dir / fmt::format("attempt_{}", restart);
      fs::remove_all(attempt_dir);
      // A restarted group must never read what the failed one wrote (torch >= 2.4 workers use no
      // per-attempt prefix); this agent keeps nothing of its own in the store.
      if (restart > 0) store->store().clear();
      const NodePlacement place{restart, 0, cfg.nproc};
      GroupResult r = co_await group.run(plan_attempt(cfg, attempt_dir, place, store->port()));
      switch (r.state) {
        case GroupResult::State::kSucceeded:
          out.state = AgentOutcome::State::kSucceeded;
          co_return out;
        case GroupResult::State::kStopped:
          out.state = AgentOutcome::State::kSignaled;
          out.signal = r.stop_signal;
          co_return out;
        case GroupResult::State::kFailed:
        case GroupResult::State::kInterrupted:  // (only multi-node jobs interrupt)
          break;
      }
      out.summary = format_failure_summary(cfg.entrypoint_name, host_name(), r.failures);
      if (restart >= cfg.max_restarts || signaled != 0) {
        out.state = AgentOutcome::State::kFailed;
        co_return out;
      }
      spdlog::warn("worker group failed; restarting it ({} of {} restarts)", restart + 1,
                   cfg.max_restarts);
    }
  }
};

}  // namespace

AgentOutcome run_agent(const AgentConfig& cfg) {
  asio::io_context io(1);
  AgentOutcome outcome;
  fs::path run_dir;
  std::unique_ptr<rendezvous::StoreServer> store;
  try {
    const std::string base =
        cfg.log_dir.empty() ? make_temp_dir("/tmp/torchelastic_XXXXXX") : cfg.log_dir;
    fs::create_directories(base);
    run_dir = make_temp_dir((fs::path(base) / (cfg.run_id + "_XXXXXX")).string());
    if (cfg.elastic) {
      if (cfg.host_store != AgentConfig::HostStore::kNo) {
        rendezvous::ServerOptions options;
        options.port = static_cast<uint16_t>(cfg.rdzv_port);
        try {
          store = std::make_unique<rendezvous::StoreServer>(io, options);
        } catch (const rendezvous::StoreError&) {
          // Another agent on this host got there first: use its store.
          if (cfg.host_store == AgentConfig::HostStore::kYes) throw;
        }
      }
    } else if (cfg.node_rank == 0) {
      rendezvous::ServerOptions options;
      options.host = cfg.store_host;
      options.port = static_cast<uint16_t>(cfg.store_port);
      store = std::make_unique<rendezvous::StoreServer>(io, options);
    }
  } catch (const std::exception& e) {
    outcome.state = AgentOutcome::State::kLaunchError;
    outcome.summary = e.what();
    return outcome;
  }
  if (cfg.elastic) {
    spdlog::info("run {}: elastic {}:{} nodes, {} workers here, store {}:{}{}, logs in {}",
                 cfg.run_id, cfg.min_nodes, cfg.max_nodes, cfg.nproc, cfg.rdzv_host, cfg.rdzv_port,
                 store ? " (hosted here)" : "", run_dir.string());
  } else {
    spdlog::info("run {}: node {} of {}, {} workers, store {}:{}, logs in {}", cfg.run_id,
                 cfg.node_rank, cfg.num_nodes, cfg.nproc, store ? "here on port" : cfg.master_addr,
                 store ? store->port() : cfg.store_port, run_dir.string());
  }

  WorkerGroup group(io, cfg.shutdown_timeout);
  int signaled = 0;
  asio::signal_set signals(io);
  for (int s : cfg.signals) signals.add(s);
  std::function<void()> listen = [&] {
    signals.async_wait([&](boost::system::error_code ec, int signo) {
      if (ec) return;
      spdlog::warn("received {}: forwarding it to the workers and shutting down",
                   signal_name(signo));
      signaled = signo;
      group.stop(signo);
      listen();
    });
  };
  listen();

  Run run{cfg, run_dir, store.get(), group, signaled, io.get_executor()};
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
    if (store) store->stop();
    finished = true;
  });
  while (!finished) io.run_one();
  // Let what is still in flight (coordinator connections closing, the store's last connections)
  // finish on its own: destroying the io_context with coroutines suspended in it would destroy
  // objects from inside their own pending operations. Bounded, in case something never completes.
  io.run_for(std::chrono::seconds(5));
  if (!io.stopped()) spdlog::warn("shutdown: some I/O was still pending after 5 s");
  return outcome;
}

}  // namespace ddprun::agent
