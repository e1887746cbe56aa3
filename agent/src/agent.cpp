#include "ddprun/agent/agent.hpp"

#include <unistd.h>

#include <filesystem>
#include <functional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "ddprun/agent/signals.hpp"
#include "ddprun/agent/worker_env.hpp"
#include "ddprun/agent/worker_group.hpp"
#include "ddprun/rendezvous/errors.hpp"
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
                                       int restart, int master_port) {
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
    l.id = WorkerIdentity{r, r, cfg.nproc, cfg.nproc, 0, 1, r, cfg.nproc};
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
  rendezvous::StoreServer& store;
  WorkerGroup& group;
  int& signaled;

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
      if (restart > 0) store.store().clear();
      GroupResult r = co_await group.run(plan_attempt(cfg, attempt_dir, restart, store.port()));
      switch (r.state) {
        case GroupResult::State::kSucceeded:
          out.state = AgentOutcome::State::kSucceeded;
          co_return out;
        case GroupResult::State::kStopped:
          out.state = AgentOutcome::State::kSignaled;
          out.signal = r.stop_signal;
          co_return out;
        case GroupResult::State::kFailed:
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
    rendezvous::ServerOptions options;
    options.host = cfg.store_host;
    options.port = static_cast<uint16_t>(cfg.store_port);
    store = std::make_unique<rendezvous::StoreServer>(io, options);
  } catch (const std::exception& e) {
    outcome.state = AgentOutcome::State::kLaunchError;
    outcome.summary = e.what();
    return outcome;
  }
  spdlog::info("run {}: {} workers, store on port {}, logs in {}", cfg.run_id, cfg.nproc,
               store->port(), run_dir.string());

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

  Run run{cfg, run_dir, *store, group, signaled};
  asio::co_spawn(io, run.attempts(), [&](std::exception_ptr e, AgentOutcome result) {
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
    store->stop();
    io.stop();
  });
  io.run();
  return outcome;
}

}  // namespace ddprun::agent
