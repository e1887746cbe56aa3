#include "ddprun/agent/agent.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "agent_run.hpp"
#include "checkpoint/coordinator.hpp"
#include "ddprun/agent/console.hpp"
#include "ddprun/agent/gpu_health.hpp"
#include "ddprun/agent/signal_listener.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/agent/temp_folder.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/store/local_address.hpp"
#include "ddprun/store/metrics_server.hpp"
#include "head_control.hpp"
#include "job_stop.hpp"
#include "logs/agent_metrics.hpp"
#include "logs/event_log.hpp"
#include "node/containment.hpp"
#include "node/owned_folders.hpp"
#include "workers/python_package.hpp"
#include "workers/round_plan.hpp"
#include "workers/warm_interpreter.hpp"
#include "workers/worker_env.hpp"
#include "workers/worker_group.hpp"

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

// The outcome of an agent that could not run the job.
AgentOutcome launch_error(std::string why) {
  AgentOutcome out;
  out.state = AgentOutcome::State::kLaunchError;
  out.summary = std::move(why);
  return out;
}

// A folder of the agent's (make_owned_folder) removed with it, its owner file last (empty path:
// none).
struct OwnedDir {
  std::string path;
  OwnedDir() = default;
  explicit OwnedDir(std::string p) : path(std::move(p)) {}
  OwnedDir(const OwnedDir&) = delete;
  OwnedDir& operator=(const OwnedDir&) = delete;
  ~OwnedDir() {
    if (!path.empty()) remove_owned_folder(path);
  }
};

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

// One agent from setup to exit. The constructor builds its parts in the order they depend on
// each other and throws std::exception when one cannot be had (a launch error); run() runs the job
// and shuts down.
class NodeAgent {
 public:
  explicit NodeAgent(const AgentConfig& cfg)
      : cfg_(cfg),
        run_dir_(make_run_dir(cfg)),
        bindings_(numa_bindings(cfg)),
        rdzv_(rendezvous::make_rendezvous(io_, cfg.rdzv)),
        containment_(io_, cgroups_wanted()),
        group_(io_, cfg.shutdown_timeout, containment_),
        events_(cfg.event_log, cfg.events_to_console ? STDERR_FILENO : -1, store::host_name(),
                cfg.rdzv.run_id),
        metrics_(cfg.rdzv.max_restarts),
        checkpoints_(io_, cfg_, rdzv_, events_),
        straggler_(io_, cfg_, rdzv_, events_),
        stop_(io_, rdzv_, group_, events_, cfg.rdzv.node_rank) {
    // What agents SIGKILLed with their guardians left in memory (this one's own folders are not).
    clean_up_orphaned_folders(memory_folder());
    add_node_environment();
    if (cfg.metrics_port) {
      events_.set_observer(
          [this](const std::string& e, const nlohmann::json& f) { metrics_.consume(e, f); });
      metrics_server_ = std::make_unique<store::MetricsServer>(
          io_, cfg.metrics_addr, static_cast<uint16_t>(*cfg.metrics_port),
          [this] { return metrics_.render() + checkpoints_.metrics(); });
      spdlog::info("metrics at http://{}:{}/metrics", cfg.metrics_addr, metrics_server_->port());
    }
    group_.set_event_log(&events_);
    group_.watch_uninterruptible(cfg.uninterruptible_timeout);
    if (cfg.hang.mode != HangPolicy::Mode::kOff) {
      // Heartbeat files are mapped by the workers: in memory (/dev/shm) where there is one, never
      // on a shared log folder.
      heartbeat_dir_.path = memory_folder_of(kHeartbeatFolders);
      group_.watch_hangs(cfg.hang, heartbeat_dir_.path, cfg.python_workers, cfg.native_debugger);
    }
    if (!cfg.preload.modules.empty() && cfg.python_workers) {  // --preload, Python workers only
      warm_ = std::make_unique<WarmInterpreter>(io_, containment_, cfg.entrypoint, cfg.preload);
      group_.start_workers_from(warm_.get(), worker_environment(cfg_.env, {}, {}, std::string()));
    }
    if (straggler_.watched()) {
      // Mapped by the workers, as the heartbeat files.
      steps_dir_.path = memory_folder_of(kStepTimesFolders);
      group_.watch_steps(steps_dir_.path, straggler_.samples());
    }
    if (!cfg.timer_file.empty()) group_.serve_torch_timers(cfg.timer_file);
    if (cfg.restart_mode == RestartMode::kInProcess) {
      // Read by the workers as often as the heartbeats: in memory where there is one.
      inprocess_dir_.path = memory_folder_of(kInProcessFolders);
      group_.restart_in_process(inprocess_dir_.path);
      group_.keep_standbys(cfg.standby_workers);
    }
    checkpoints_.start();
    // A spare node holds memory for the checkpoints it would restore, and keeps its standbys
    // while it waits: the ranks of a node it replaces then start in warm processes.
    rdzv_->on_spare(
        [this, standbys = cfg.restart_mode == RestartMode::kInProcess && cfg.standby_workers > 0] {
          checkpoints_.waiting_as_spare();
          if (standbys) stand_by_as_spare();
        });
    const bool reports = !cfg.event_log.empty() || cfg.events_to_console || cfg.metrics_port;
    // The node check and the checkpoints' restore plan tell a round's nodes apart by their ids
    // (without them the node check never ran unless an event log was asked for).
    if (reports || cfg.rdzv.max_nodes > 1) rdzv_->want_members();
    const bool spares_wanted =
        straggler_.watched() && cfg.straggler.action == StragglerPolicy::Action::kReplace;
    if (reports || spares_wanted) {
      // Following every node's presence costs this agent one event per join or leave anywhere in
      // the job: only for an agent that reports them, or counts the spares.
      rdzv_->watch_membership([this, reports](const rendezvous::MembershipChange& m) {
        straggler_.node_seen(m.joined);
        if (!reports) return;
        events_.record(m.joined ? "node_joined" : "node_left",
                       {{"node_id", m.node}, {"host", m.host}, {"nproc", m.nproc}});
      });
    }
  }

  AgentOutcome run() {
    SignalListener signals(io_, cfg_.signals, [this](int signo) {
      spdlog::warn("received {}: forwarding it to the workers and shutting down",
                   signal_name(signo));
      stop_.signal(signo);
    });
    HeadControl control(io_, cfg_.control_fd, [this](int signo) { stop_.signal(signo); });
    // Signals are handled from here on: the first line says so to whoever waits for it.
    spdlog::info("run {}: {}, {} workers here, logs in {}", cfg_.rdzv.run_id, rdzv_->describe(),
                 cfg_.rdzv.nproc, run_dir_.string());
    checkpoints_.say_budget();
    events_.record("agent_started", {{"nproc", cfg_.rdzv.nproc},
                                     {"max_restarts", cfg_.rdzv.max_restarts},
                                     {"rendezvous", rdzv_->describe()},
                                     {"log_dir", run_dir_.string()}});
    // Where GPUs exist, NVML checks them before each round (no GPU, or no driver: nothing to do).
    // (Shared with the thread that reads it: one a wedged GPU holds may outlive this agent.)
    const std::shared_ptr<const Nvml> nvml = Nvml::open();
    const AgentParts parts{cfg_,      run_dir_, rdzv_,        group_, stop_,        events_,
                           bindings_, io_,      containment_, nvml,   checkpoints_, straggler_};
    AgentOutcome outcome;
    bool finished = false;
    // A stop cancels whatever the job waits on outside its workers' run (joining, a connect to
    // the master's store, a health check, a round's barrier): each such wait ends at once.
    const auto on_end = [&](std::exception_ptr e, AgentOutcome result) {
      if (!e) {
        outcome = std::move(result);
      } else {
        try {
          std::rethrow_exception(e);
        } catch (const boost::system::system_error& ex) {
          if (ex.code() == asio::error::operation_aborted && stop_.stopping()) {
            // The stop cancelled a wait that had no way out of its own: the job was stopped.
            outcome.state = AgentOutcome::State::kSignaled;
            outcome.signal = stop_.signo();
            outcome.run_log_dir = run_dir_.string();
          } else {
            outcome = launch_error(ex.what());
          }
        } catch (const std::exception& ex) {
          outcome = launch_error(ex.what());
        }
      }
      signals.cancel();
      group_.close_torch_timers();  // its FIFO's read would keep the io_context busy below
      checkpoints_.stop();          // and its ticks, polls and copies under way
      straggler_.stop();            // and the round's windows
      group_.start_workers_from(nullptr, {});
      // (A standby's start still waiting for the warm interpreter's answer, where a stop cut the
      // job's end short, keeps it until it has one: below.)
      if (!group_.standby_starting()) warm_.reset();  // so would its interpreter's exit watch
      control.close();
      containment_.stop_listening();
      rdzv_->abandon();
      stop_.end();  // what the job ran beside its coroutine, the rendezvous abandoned first
      finished = true;
    };
    asio::co_spawn(io_, run_job(parts), asio::bind_cancellation_slot(stop_.slot(), on_end));
    while (!finished) io_.run_one();
    for (const auto until = std::chrono::steady_clock::now() + WorkerGroup::kStandbyStartLimit;
         group_.standby_starting() && std::chrono::steady_clock::now() < until;) {
      io_.run_one_for(std::chrono::milliseconds(100));
    }
    warm_.reset();
    events_.record("job_end", job_end_fields(outcome));
    metrics_server_.reset();  // its acceptor would keep the io_context busy below
    // Let what is still in flight (coordinator connections closing, the store's last
    // connections) finish on its own: destroying the io_context with coroutines suspended in it
    // would destroy objects from inside their own pending operations. Bounded, in case something
    // never completes.
    io_.run_for(std::chrono::seconds(5));
    if (!io_.stopped()) spdlog::warn("shutdown: some I/O was still pending after 5 s");
    // What the workers and the agent wrote comes before what the caller prints next (bounded).
    Console::flush_all();
    return outcome;
  }

 private:
  // A folder of this agent's in memory (node/owned_folders.hpp) named `kind`XXXXXX, for files the
  // workers map: removed with the agent, by its guardian after a SIGKILL, and where both were
  // SIGKILLed by the next agent on the node.
  std::string memory_folder_of(const char* kind) {
    std::string path = make_owned_folder(memory_folder(), kind);
    removed_after_a_kill(path);
    return path;
  }

  // `folder` goes with the guardian's clean-up after a SIGKILL; a warning where it cannot.
  void removed_after_a_kill(const std::string& folder) {
    if (!containment_.remove_after_a_kill(folder)) {
      spdlog::warn("{} would be left behind if this agent were SIGKILLed", folder);
    }
  }

  // --standby_workers on a spare node: standbys made from this node's launches as if it were the
  // only node of a round (a standby takes only what every worker shares); their output files, where
  // the workers' go to files, in <log dir>/spare/standby<N>/.
  void stand_by_as_spare() {
    // Planned once a spare wait (a plan again would truncate the filtered logs the standbys write).
    if (group_.standing_by_as_spare()) return;
    rendezvous::Round round;
    round.world_size = cfg_.rdzv.nproc;
    const fs::path dir = run_dir_ / "spare";
    try {
      std::vector<WorkerLaunch> sample =
          plan_round(cfg_, dir, round, {}, bindings_, std::nullopt, RoleRanks{0, cfg_.rdzv.nproc});
      for (int r = 0; r < cfg_.rdzv.nproc; ++r) {  // (a worker's folders: none runs here)
        std::error_code ignored;
        fs::remove(dir / std::to_string(r), ignored);
      }
      group_.stand_by_as_spare(std::move(sample));
    } catch (const std::exception& e) {
      spdlog::warn("--standby_workers: this spare node starts no standby: {}", e.what());
    }
  }

  // What every worker of this node gets besides the agent's environment: where its in-memory
  // checkpoint lives and what bounds it, and ddprun's Python modules on the path of a Python one.
  void add_node_environment() {
    removed_after_a_kill(checkpoints_.path());
    checkpoints_.add_worker_environment(cfg_.env);
    if (const auto& marker = containment_.worker_marker()) cfg_.env[marker->first] = marker->second;
    if (!cfg_.python_workers) return;
    // Beside the regions (not in the log folder, whose layout is torchrun's), gone with them.
    const std::string modules =
        write_python_package(fs::path(checkpoints_.path()) / "python", straggler_.watched())
            .string();
    auto& path = cfg_.env["PYTHONPATH"];
    path = path.empty() ? modules : path + ":" + modules;
  }

  static fs::path make_run_dir(const AgentConfig& cfg) {
    // Absolute and normal, as torch makes it (os.path.abspath): a worker that changes its working
    // folder still finds its error file.
    const fs::path base =
        cfg.log_dir.empty()
            ? fs::path(make_temp_dir((temp_folder(cfg.env) / "torchelastic_XXXXXX").string()))
            : fs::absolute(cfg.log_dir).lexically_normal();
    fs::create_directories(base);
    return make_temp_dir((base / (cfg.rdzv.run_id + "_XXXXXX")).string());
  }

  // DDPRUN_CGROUPS=0: workers in process groups only (where something else manages cgroups).
  static bool cgroups_wanted() {
    const char* cgroups = std::getenv("DDPRUN_CGROUPS");
    return cgroups == nullptr || std::string_view(cgroups) != "0";
  }

  AgentConfig cfg_;  // as given, with the node's environment for the workers added
  asio::io_context io_{1};
  fs::path run_dir_;
  std::map<int, CpuSet> bindings_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  Containment containment_;
  WorkerGroup group_;
  EventLog events_;
  AgentMetrics metrics_;
  CheckpointCoordinator checkpoints_;  // the workers' regions, the copies to disk and to peers
  StragglerCheck straggler_;           // a node that holds the steps back while the job trains
  JobStop stop_;                       // a signal's way through the job, bound to its coroutine
  std::unique_ptr<store::MetricsServer> metrics_server_;
  OwnedDir heartbeat_dir_;
  OwnedDir steps_dir_;
  OwnedDir inprocess_dir_;
  std::unique_ptr<WarmInterpreter> warm_;
};

}  // namespace

AgentOutcome run_agent(const AgentConfig& cfg) {
  std::unique_ptr<NodeAgent> agent;
  try {
    agent = std::make_unique<NodeAgent>(cfg);
  } catch (const std::exception& e) {
    return launch_error(e.what());
  }
  return agent->run();
}

}  // namespace ddprun::agent
