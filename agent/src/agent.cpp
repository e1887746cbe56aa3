#include "ddprun/agent/agent.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent_run.hpp"
#include "checkpoint/memory_use.hpp"
#include "checkpoint/peer_service.hpp"
#include "checkpoint/persister.hpp"
#include "checkpoint/regions.hpp"
#include "checkpoint/replicator.hpp"
#include "ddprun/agent/console.hpp"
#include "ddprun/agent/gpu_health.hpp"
#include "ddprun/agent/signal_listener.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/store/local_address.hpp"
#include "ddprun/store/metrics_server.hpp"
#include "ddprun/store/tls.hpp"
#include "exchanges/stop_exchange.hpp"
#include "head_control.hpp"
#include "logs/agent_metrics.hpp"
#include "logs/event_log.hpp"
#include "node/containment.hpp"
#include "workers/python_package.hpp"
#include "workers/round_plan.hpp"
#include "workers/warm_interpreter.hpp"
#include "workers/worker_env.hpp"
#include "workers/worker_group.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// How long a stopping agent that waits outside its workers' run gives its peers' store to take
// the news of the stop before it leaves.
constexpr auto kAnnounceLimit = std::chrono::seconds(1);

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

// A folder made for the agent's run and removed with it (empty path: none).
struct OwnedDir {
  std::string path;
  OwnedDir() = default;
  explicit OwnedDir(std::string p) : path(std::move(p)) {}
  OwnedDir(const OwnedDir&) = delete;
  OwnedDir& operator=(const OwnedDir&) = delete;
  ~OwnedDir() {
    std::error_code ignored;
    if (!path.empty()) fs::remove_all(path, ignored);
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
        checkpoints_(cfg.rdzv.run_id),
        bindings_(numa_bindings(cfg)),
        rdzv_(rendezvous::make_rendezvous(io_, cfg.rdzv)),
        containment_(io_, cgroups_wanted()),
        group_(io_, cfg.shutdown_timeout, containment_),
        events_(cfg.event_log, cfg.events_to_console ? STDERR_FILENO : -1, store::host_name(),
                cfg.rdzv.run_id),
        metrics_(cfg.rdzv.max_restarts),
        checkpoint_status_(io_, rdzv_, checkpoints_) {
    add_node_environment();
    if (cfg.metrics_port) {
      events_.set_observer(
          [this](const std::string& e, const nlohmann::json& f) { metrics_.consume(e, f); });
      metrics_server_ = std::make_unique<store::MetricsServer>(
          io_, cfg.metrics_addr, static_cast<uint16_t>(*cfg.metrics_port), [this] {
            return metrics_.render() + checkpoints_.metrics(cfg_.rdzv.nproc) +
                   checkpoint_memory_metrics(checkpoints_.path(), cfg_.checkpoint_memory_limit) +
                   replication_metrics();
          });
      spdlog::info("metrics at http://{}:{}/metrics", cfg.metrics_addr, metrics_server_->port());
    }
    group_.set_event_log(&events_);
    group_.watch_uninterruptible(cfg.uninterruptible_timeout);
    if (cfg.hang.mode != HangPolicy::Mode::kOff) {
      // Heartbeat files are mapped by the workers: in memory (/dev/shm) where there is one, never
      // on a shared log folder.
      heartbeat_dir_.path =
          make_temp_dir(fs::exists("/dev/shm") ? "/dev/shm/ddprun-heartbeats-XXXXXX"
                                               : "/tmp/ddprun-heartbeats-XXXXXX");
      group_.watch_hangs(cfg.hang, heartbeat_dir_.path, cfg.python_workers, cfg.native_debugger);
    }
    if (!cfg.preload.modules.empty() && cfg.python_workers) {  // --preload, Python workers only
      warm_ = std::make_unique<WarmInterpreter>(io_, containment_, cfg.entrypoint, cfg.preload);
      group_.start_workers_from(warm_.get(), worker_environment(cfg_.env, {}, {}, std::string()));
    }
    if (!cfg.timer_file.empty()) group_.serve_torch_timers(cfg.timer_file);
    if (cfg.rdzv.max_nodes > 1 && cfg.checkpoint_peer_copies) start_peer_copies();
    if (!cfg.checkpoint_dir.empty()) {
      persister_ = std::make_unique<CheckpointPersister>(
          io_, checkpoints_.path(), cfg.checkpoint_dir, cfg.checkpoint_persist_every,
          cfg.rdzv.auth_token, cfg_.checkpoint_memory_limit,
          [this](const PersistReport& r) { report_persist(r); });
    }
    const bool reports = !cfg.event_log.empty() || cfg.events_to_console || cfg.metrics_port;
    // The node check and the checkpoints' restore plan tell a round's nodes apart by their ids
    // (without them the node check never ran unless an event log was asked for).
    if (reports || cfg.rdzv.max_nodes > 1) rdzv_->want_members();
    if (reports) {
      // Following every node's presence costs this agent one event per join or leave anywhere in
      // the job: only for an agent that reports them.
      rdzv_->watch_membership([this](const rendezvous::MembershipChange& m) {
        events_.record(m.joined ? "node_joined" : "node_left",
                       {{"node_id", m.node}, {"host", m.host}, {"nproc", m.nproc}});
      });
    }
  }

  AgentOutcome run() {
    SignalListener signals(io_, cfg_.signals, [this](int signo) {
      spdlog::warn("received {}: forwarding it to the workers and shutting down",
                   signal_name(signo));
      on_signal(signo);
    });
    HeadControl control(io_, cfg_.control_fd, [this](int signo) { on_signal(signo); });
    // Signals are handled from here on: the first line says so to whoever waits for it.
    spdlog::info("run {}: {}, {} workers here, logs in {}", cfg_.rdzv.run_id, rdzv_->describe(),
                 cfg_.rdzv.nproc, run_dir_.string());
    if (cfg_.checkpoint_memory_limit) {
      spdlog::info("checkpoints: at most {:.1f} MiB of memory on this node{}",
                   *cfg_.checkpoint_memory_limit / 1048576.0,
                   budget_given_ ? std::string(" (--checkpoint_memory_limit)")
                                 : fmt::format(" (half the size of the file system holding {}; "
                                               "--checkpoint_memory_limit sets it)",
                                               checkpoints_.path()));
    }
    events_.record("agent_started", {{"nproc", cfg_.rdzv.nproc},
                                     {"max_restarts", cfg_.rdzv.max_restarts},
                                     {"rendezvous", rdzv_->describe()},
                                     {"log_dir", run_dir_.string()}});
    // Where GPUs exist, NVML checks them before each round (no GPU, or no driver: nothing to do).
    const std::unique_ptr<Nvml> nvml = Nvml::open();
    const AgentParts parts{cfg_,
                           run_dir_,
                           rdzv_,
                           group_,
                           signaled_,
                           peer_stopped_,
                           events_,
                           bindings_,
                           io_,
                           containment_,
                           nvml.get(),
                           checkpoints_,
                           peer_service_ ? peer_service_->sources() : local_sources_,
                           persister_.get(),
                           checkpoint_status_,
                           peer_service_.get(),
                           replicator_.get(),
                           peer_host_};
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
          if (ex.code() == asio::error::operation_aborted && signaled_ != 0) {
            // The stop cancelled a wait that had no way out of its own: the job was stopped.
            outcome.state = AgentOutcome::State::kSignaled;
            outcome.signal = signaled_;
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
      checkpoint_status_.stop();    // and its ticks (which read what follows)
      persister_.reset();           // so would its poll; a copy under way ends at its next chunk
      replicator_.reset();          // and a copy to a peer under way: abandoned with the service
      peer_service_.reset();
      group_.start_workers_from(nullptr, {});
      warm_.reset();  // so would its interpreter's exit watch
      control.close();
      containment_.stop_listening();
      rdzv_->abandon();
      finished = true;
    };
    asio::co_spawn(io_, run_job(parts), asio::bind_cancellation_slot(stop_waits_.slot(), on_end));
    while (!finished) io_.run_one();
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
  // A job of several nodes: this node serves copies of its peers' checkpoints and copies its own
  // to its peer, proving the job's token and using TLS where the job does.
  void start_peer_copies() {
    PeerAuth auth;
    auth.token = cfg_.rdzv.auth_token;
    auth.mac = cfg_.rdzv.auth_token.has_value();
    auth.scope = "checkpoints/" + cfg_.rdzv.run_id;
    if (cfg_.rdzv.tls.enabled) {
      if (cfg_.rdzv.tls.cert_file.empty()) {
        spdlog::warn(
            "checkpoints are not copied to a peer node: the job uses TLS and this node has no "
            "certificate to serve the copies with (rdzv_conf cert and key)");
        return;
      }
      auth.client_tls = store::client_tls_context(cfg_.rdzv.tls);
      auth.server_tls = store::server_tls_context(cfg_.rdzv.tls);
    }
    peer_host_ = cfg_.rdzv.local_addr;
    if (peer_host_.empty()) {
      try {
        peer_host_ = store::local_address_towards(cfg_.rdzv.endpoint_host, cfg_.rdzv.endpoint_port);
      } catch (const std::exception&) {
        peer_host_ = store::host_name();
      }
    }
    // Only the address the peers are told (not every address of the host): the first of its
    // addresses that this host can bind.
    std::string why = "it resolves to no address";
    boost::system::error_code ec;
    for (const auto& entry : asio::ip::tcp::resolver(io_).resolve(peer_host_, "0", ec)) {
      try {
        peer_service_ = std::make_unique<PeerService>(
            auth, entry.endpoint().address().to_string(), fs::path(checkpoints_.path()) / "peers",
            cfg_.checkpoint_memory_limit, checkpoints_.path(), run_tag_of(cfg_.rdzv.run_id));
        break;
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    if (!peer_service_) {
      spdlog::warn(
          "checkpoints are not copied to a peer node: this node's address {} cannot be served "
          "({}; --local_addr names the address the peers reach this node at)",
          peer_host_, ec ? ec.message() : why);
      return;
    }
    replicator_ = std::make_unique<CheckpointReplicator>(
        io_, *peer_service_, checkpoints_.path(),
        [this](const TransferReport& r, const std::string& peer) { report_replication(r, peer); });
    replicator_->on_behind([this](bool behind, int64_t steps) { report_behind(behind, steps); });
    replicator_->on_room([this](uint64_t wanted, uint64_t freed) {
      spdlog::warn(
          "checkpoint: a worker's save needed {} bytes more of the node's budget: copies "
          "held for and kept for peers dropped, {} bytes freed",
          wanted, freed);
      events_.record("checkpoint_room_made", {{"wanted", wanted}, {"freed", freed}});
    });
    checkpoint_status_.replica([this] { return replica_account(); });
  }

  // The copies fell behind, or caught up again: a warning (a line) and an event, once each time.
  void report_behind(bool behind, int64_t steps) {
    const std::optional<int64_t> safe = replicator_->safe_step();
    const nlohmann::json safe_step = safe ? nlohmann::json(*safe) : nlohmann::json(nullptr);
    if (!behind) {
      spdlog::info("checkpoint: the copies to the peer node at {} caught up (safe step {})",
                   replicator_->peer(), safe_step.dump());
      events_.record("checkpoint_copies_caught_up",
                     {{"peer", replicator_->peer()}, {"safe_step", safe_step}});
      return;
    }
    spdlog::warn(
        "checkpoint: the copies to the peer node at {} are behind: the safe step ({}) has not "
        "advanced while the workers saved {} steps (the stride is {}); a node lost now loses "
        "those steps",
        replicator_->peer(), safe ? std::to_string(*safe) : "none yet", steps,
        replicator_->stride());
    events_.record("checkpoint_copies_behind", {{"peer", replicator_->peer()},
                                                {"safe_step", safe_step},
                                                {"steps", steps},
                                                {"stride", replicator_->stride()}});
  }

  // A copy of a step to the peer ended: the first to each peer, and each failure (once per
  // reason), go to the log and the event log; every one to the status and the metrics.
  void report_replication(const TransferReport& r, const std::string& peer) {
    if (r.ok) {
      if (std::exchange(replicating_to_, peer) == peer) return;
      spdlog::info("checkpoint: step {} copied to the peer node at {} ({} bytes in {:.3f} s)",
                   r.step, peer, r.bytes, r.took.count());
      events_.record(
          "checkpoint_replicated",
          {{"step", r.step}, {"peer", peer}, {"bytes", r.bytes}, {"seconds", r.took.count()}});
      replication_failure_.clear();
      return;
    }
    replicating_to_.clear();
    if (std::exchange(replication_failure_, r.detail) == r.detail) return;
    spdlog::warn("checkpoint: step {} was not copied to the peer node at {}: {}", r.step, peer,
                 r.detail);
    events_.record("checkpoint_replication_failed",
                   {{"step", r.step}, {"peer", peer}, {"reason", r.detail}});
  }

  // What `ddprun status` shows of the copies (CheckpointStatus::account's "replica"); null
  // before any copy went or came.
  nlohmann::json replica_account() const {
    const std::optional<int64_t> safe = replicator_->safe_step();
    const std::optional<int64_t> newest = replicator_->newest_local();
    nlohmann::json holds = nlohmann::json::object();
    for (const auto& [origin, ranks] : peer_service_->copies().steps()) {
      holds[origin] = ranks.empty() ? std::vector<int64_t>{} : ranks.front();
    }
    if (!safe && holds.empty()) return nullptr;
    return {{"peer", replicator_->peer()},
            {"safe_step", safe ? nlohmann::json(*safe) : nlohmann::json(nullptr)},
            {"lag", safe && newest ? std::max<int64_t>(0, *newest - *safe) : 0},
            {"stride", replicator_->stride()},
            {"behind", replicator_->behind()},
            {"holds", std::move(holds)}};
  }

  // The copies in Prometheus' text: the safe step, the lag behind it and the bytes of other
  // nodes' copies held here (nothing for a job of one node).
  std::string replication_metrics() const {
    if (!replicator_) return "";
    const std::optional<int64_t> safe = replicator_->safe_step();
    const std::optional<int64_t> newest = replicator_->newest_local();
    return store::prometheus_sample(
               "ddprun_checkpoint_safe_step", "gauge",
               "The newest step whose every local rank's copy the peer node holds (-1: none).",
               safe ? static_cast<double>(*safe) : -1.0) +
           store::prometheus_sample(
               "ddprun_checkpoint_replication_lag_steps", "gauge",
               "Steps between the newest every local rank holds and the safe step.",
               safe && newest ? static_cast<double>(std::max<int64_t>(0, *newest - *safe)) : 0.0) +
           store::prometheus_sample(
               "ddprun_checkpoint_copies_behind", "gauge",
               "1 while the safe step has not advanced for four windows of the stride's steps.",
               replicator_->behind() ? 1.0 : 0.0) +
           store::prometheus_sample("ddprun_checkpoint_peer_copies_bytes", "gauge",
                                    "Bytes of other nodes' checkpoint copies this node holds.",
                                    static_cast<double>(peer_service_->copies().bytes()));
  }

  // A copy to or from --checkpoint_dir ended: the log and the event log say how.
  void report_persist(const PersistReport& r) {
    nlohmann::json f = {{"local_rank", r.local_rank}, {"rank", r.rank}, {"step", r.step}};
    switch (r.kind) {
      case PersistReport::Kind::kPersisted:
      case PersistReport::Kind::kRestored:
        f["bytes"] = r.bytes;
        f["seconds"] = r.took.count();
        f["file"] = r.detail;
        if (r.kind == PersistReport::Kind::kPersisted) {
          checkpoint_status_.persisted(r.step, r.took.count());
        }
        events_.record(r.kind == PersistReport::Kind::kPersisted ? "checkpoint_persisted"
                                                                 : "checkpoint_read_back",
                       std::move(f));
        return;
      case PersistReport::Kind::kDropped:
        spdlog::info("checkpoint: step {} of rank {} not persisted: {}", r.step, r.rank, r.detail);
        f["reason"] = r.detail;
        events_.record("checkpoint_persist_dropped", std::move(f));
        return;
      case PersistReport::Kind::kFailed:
        spdlog::error("checkpoint: step {} of rank {} could not be copied: {}", r.step, r.rank,
                      r.detail);
        f["reason"] = r.detail;
        events_.record("checkpoint_persist_failed", std::move(f));
        return;
    }
  }

  // What every worker of this node gets besides the agent's environment: where its in-memory
  // checkpoint lives and what bounds it, and ddprun's Python modules on the path of a Python one.
  void add_node_environment() {
    if (!containment_.remove_after_a_kill(checkpoints_.path())) {
      spdlog::warn("{} would be left behind if this agent were SIGKILLed", checkpoints_.path());
    }
    cfg_.env["DDPRUN_CHECKPOINT_DIR"] = checkpoints_.path();
    budget_given_ = cfg_.checkpoint_memory_limit.has_value();
    if (!budget_given_) {
      cfg_.checkpoint_memory_limit = default_checkpoint_budget(checkpoints_.path());
    }
    if (cfg_.checkpoint_memory_limit) {
      cfg_.env["DDPRUN_CHECKPOINT_MEMORY_LIMIT"] = std::to_string(*cfg_.checkpoint_memory_limit);
      checkpoint_status_.budget(*cfg_.checkpoint_memory_limit);
    }
    if (!cfg_.python_workers) return;
    // Beside the regions (not in the log folder, whose layout is torchrun's), gone with them.
    const std::string modules =
        write_python_package(fs::path(checkpoints_.path()) / "python").string();
    auto& path = cfg_.env["PYTHONPATH"];
    path = path.empty() ? modules : path + ":" + modules;
  }

  static fs::path make_run_dir(const AgentConfig& cfg) {
    // Absolute and normal, as torch makes it (os.path.abspath): a worker that changes its working
    // folder still finds its error file.
    const fs::path base = cfg.log_dir.empty() ? fs::path(make_temp_dir("/tmp/torchelastic_XXXXXX"))
                                              : fs::absolute(cfg.log_dir).lexically_normal();
    fs::create_directories(base);
    return make_temp_dir((base / (cfg.rdzv.run_id + "_XXXXXX")).string());
  }

  // DDPRUN_CGROUPS=0: workers in process groups only (where something else manages cgroups).
  static bool cgroups_wanted() {
    const char* cgroups = std::getenv("DDPRUN_CGROUPS");
    return cgroups == nullptr || std::string_view(cgroups) != "0";
  }

  // A signal to this agent, or one the head node passed on.
  void on_signal(int signo) {
    events_.record("signal", {{"signal", signal_name(signo)}});
    const bool first = std::exchange(signaled_, signo) == 0;
    if (std::exchange(peer_stopped_, false) && group_.active()) {
      // The workers are already stopping with the job's signal, which a peer passed on first:
      // this one is the same stop arriving here, not a second request to kill at once.
    } else if (group_.active()) {
      if (first) asio::co_spawn(io_, announce_stop(signo), asio::detached);
      group_.stop(signo);
    } else if (first) {
      stop_waiting_after_announcing(signo);
    } else {
      stop_waiting();
    }
  }

  // Waiting outside the workers' run (in the rendezvous, its exit barrier, for the master's
  // store, on a health check): the peers are told of the stop first (at most kAnnounceLimit; node
  // 0's store goes with its agent), then every wait ends.
  void stop_waiting_after_announcing(int signo) {
    auto limit = std::make_shared<asio::steady_timer>(io_, kAnnounceLimit);
    limit->async_wait([this, limit](boost::system::error_code) { stop_waiting(); });
    asio::co_spawn(io_, announce_stop(signo), [limit](std::exception_ptr) { limit->cancel(); });
  }

  asio::awaitable<void> announce_stop(int signo) {
    return stop_exchange::announce(rdzv_, cfg_.rdzv.node_rank, signo);
  }

  void stop_waiting() {
    if (std::exchange(stopped_waiting_, true)) return;
    if (group_.active()) {  // a round's workers started meanwhile: the stop is theirs
      group_.stop(signaled_);
      return;
    }
    rdzv_->abandon();
    stop_waits_.emit(asio::cancellation_type::terminal);
  }

  AgentConfig cfg_;  // as given, with the node's environment for the workers added
  asio::io_context io_{1};
  fs::path run_dir_;
  CheckpointRegions checkpoints_;
  std::map<int, CpuSet> bindings_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  Containment containment_;
  WorkerGroup group_;
  EventLog events_;
  AgentMetrics metrics_;
  CheckpointStatus checkpoint_status_;  // for `ddprun status`
  bool budget_given_ = false;           // --checkpoint_memory_limit given (else its default)
  std::unique_ptr<CheckpointPersister> persister_;  // --checkpoint_dir; reports to both above
  std::unique_ptr<PeerService> peer_service_;       // several nodes: copies to and from peers
  // Without a peer service: the slots this node holds (its regions and kept copies).
  SlotSources local_sources_{checkpoints_.path(), fs::path(checkpoints_.path()) / "kept", nullptr,
                             run_tag_of(cfg_.rdzv.run_id)};
  std::unique_ptr<CheckpointReplicator> replicator_;
  std::string peer_host_;
  std::string replicating_to_;       // the peer the last copy reached ("" none, or it failed)
  std::string replication_failure_;  // the last copy's failure, said once
  std::unique_ptr<store::MetricsServer> metrics_server_;
  OwnedDir heartbeat_dir_;
  std::unique_ptr<WarmInterpreter> warm_;
  int signaled_ = 0;
  bool peer_stopped_ = false;
  asio::cancellation_signal stop_waits_;  // bound to the job's coroutine
  bool stopped_waiting_ = false;
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
