#include "checkpoint/coordinator.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/ip/tcp.hpp>

#include "checkpoint/memory_use.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/round_restore.hpp"
#include "ddprun/store/local_address.hpp"
#include "ddprun/store/metrics_server.hpp"
#include "ddprun/store/tls.hpp"
#include "exchanges/copy_board.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// How long a job that ended waits for its checkpoints' copies to --checkpoint_dir.
constexpr auto kPersistDrainLimit = std::chrono::minutes(10);

}  // namespace

CheckpointCoordinator::CheckpointCoordinator(asio::io_context& io, AgentConfig& cfg,
                                             std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                             EventLog& events)
    : io_(io),
      cfg_(cfg),
      rdzv_(std::move(rdzv)),
      events_(events),
      regions_(cfg.rdzv.run_id),
      status_(io, rdzv_, regions_),
      local_sources_(regions_.path(), fs::path(regions_.path()) / "kept", nullptr,
                     run_tag_of(cfg.rdzv.run_id)) {
  budget_given_ = cfg_.checkpoint_memory_limit.has_value();
  if (!budget_given_) cfg_.checkpoint_memory_limit = default_checkpoint_budget(regions_.path());
  if (cfg_.checkpoint_memory_limit) status_.budget(*cfg_.checkpoint_memory_limit);
}

CheckpointCoordinator::~CheckpointCoordinator() { stop(); }

void CheckpointCoordinator::add_worker_environment(std::map<std::string, std::string>& env) const {
  env["DDPRUN_CHECKPOINT_DIR"] = regions_.path();
  if (cfg_.checkpoint_memory_limit) {
    env["DDPRUN_CHECKPOINT_MEMORY_LIMIT"] = std::to_string(*cfg_.checkpoint_memory_limit);
  }
}

void CheckpointCoordinator::start() {
  if (cfg_.rdzv.max_nodes > 1 && cfg_.checkpoint_peer_copies) start_peer_copies();
  if (!cfg_.checkpoint_dir.empty()) {
    persister_ = std::make_unique<CheckpointPersister>(
        io_, regions_.path(), cfg_.checkpoint_dir, cfg_.checkpoint_persist_every,
        cfg_.rdzv.auth_token, cfg_.checkpoint_memory_limit,
        [this](const PersistReport& r) { report_persist(r); });
  }
}

void CheckpointCoordinator::say_budget() const {
  if (!cfg_.checkpoint_memory_limit) return;
  spdlog::info("checkpoints: at most {:.1f} MiB of memory on this node{}",
               *cfg_.checkpoint_memory_limit / 1048576.0,
               budget_given_ ? std::string(" (--checkpoint_memory_limit)")
                             : fmt::format(" (half the size of the file system holding {}; "
                                           "--checkpoint_memory_limit sets it)",
                                           regions_.path()));
}

std::string CheckpointCoordinator::metrics() const {
  return regions_.metrics(local_ranks(cfg_)) +
         checkpoint_memory_metrics(regions_.path(), cfg_.checkpoint_memory_limit) +
         replication_metrics();
}

asio::awaitable<void> CheckpointCoordinator::joined() {
  // A job without a token: the checkpoint copies prove the job's secret, which only a member can
  // read.
  if (peer_service_ && !cfg_.rdzv.auth_token) {
    peer_service_->use_secret(store::Token(co_await rdzv_->job_secret()));
  }
}

asio::awaitable<std::optional<CheckpointRestore>> CheckpointCoordinator::restore_for(
    const rendezvous::Round& round) {
  if (replicator_) replicator_->stop();  // the kept steps stay as they are meanwhile
  const RestoreParts parts{cfg_,
                           rdzv_,
                           events_,
                           regions_,
                           peer_service_ ? peer_service_->sources() : local_sources_,
                           peer_service_.get(),
                           peer_host_,
                           persister_.get(),
                           round.member(round.node_rank)};
  const RoundRestore restored = co_await restore_round(parts, round);
  if (restored.outcome != checkpoint_sources::Outcome::kSame) {
    const bool round_ended = restored.outcome == checkpoint_sources::Outcome::kRoundEnded;
    throw RestoreDisagreed(round_ended
                               ? "the round ended before its nodes agreed on a checkpoint step"
                               : "the nodes did not decide on the same checkpoint step to restore",
                           round_ended);
  }
  status_.restored(restored.account);
  // With the restore done (its transfers had the links and the memory to themselves), this
  // node's copies go to its peer of the round.
  if (replicator_) {
    replicator_->restored(restored.restore ? std::optional(restored.restore->step) : std::nullopt);
  }
  if (!restored.nodes.empty()) copy_to_peer(round, restored.nodes);
  co_return restored.restore;
}

// This node's copies go to the next node of the round (node k's to node k+1 mod n); none with one
// node.
void CheckpointCoordinator::copy_to_peer(
    const rendezvous::Round& round, const std::vector<checkpoint_sources::NodeCheckpoints>& nodes) {
  if (!replicator_) return;
  std::vector<RankSlot> ranks;
  for (const auto& [local, global] : round_ranks(cfg_, round)) ranks.push_back({local, global});
  std::optional<PeerAddress> peer;
  if (nodes.size() > 1) {
    const auto& next = nodes[(static_cast<size_t>(round.node_rank) + 1) % nodes.size()];
    if (next.port != 0) peer = PeerAddress{next.host, next.port};
  }
  replicator_->watch(round.number, nodes[static_cast<size_t>(round.node_rank)].id, std::move(ranks),
                     std::move(peer), copy_board::board(rdzv_, round));
}

void CheckpointCoordinator::round_started(const rendezvous::Round& round) {
  const auto ranks = round_ranks(cfg_, round);
  if (persister_) persister_->watch(ranks);
  status_.watch(ranks);
  if (restore_room_) {
    std::vector<int> locals;
    for (const auto& [local, global] : ranks) locals.push_back(local);
    restore_room_->tell(std::move(locals));
  }
}

void CheckpointCoordinator::waiting_as_spare() {
  if (restore_room_) restore_room_->hold();
}

void CheckpointCoordinator::round_formed() {
  if (restore_room_) restore_room_->pause();
}

void CheckpointCoordinator::workers_stopping() {
  if (replicator_) replicator_->interrupt();
}

void CheckpointCoordinator::round_ended(const rendezvous::Round& round, bool workers_failed) {
  if (replicator_) replicator_->stop();  // what the next round restores stays put
  record_held(round);
  if (workers_failed && persister_) persister_->persist_newest();
}

asio::awaitable<void> CheckpointCoordinator::job_ended() {
  if (!persister_) co_return;
  persister_->persist_newest();
  co_await persister_->drain(kPersistDrainLimit);
}

void CheckpointCoordinator::stop() {
  status_.stop();
  persister_.reset();   // its poll would keep the io_context busy; a copy ends at its next chunk
  replicator_.reset();  // and a copy to a peer under way: abandoned with the service
  restore_room_.reset();
  peer_service_.reset();
}

// The event log's account of the in-memory checkpoints once a round's workers ended: per local
// rank the steps its region holds, and the bytes of the node's regions; in a job of several nodes
// also the safe step (every local rank's copy on the peer), the peer, the copies this node holds
// for others (per origin node, per local rank), the payload bytes its copies sent and those the
// peer held already, so far, and how long the last stage and the last put took.
void CheckpointCoordinator::record_held(const rendezvous::Round& round) {
  std::vector<std::vector<int64_t>> held;
  for (const auto& [local, global] : round_ranks(cfg_, round)) {
    held.push_back(regions_.steps_held(local));
  }
  if (std::all_of(held.begin(), held.end(), [](const auto& steps) { return steps.empty(); })) {
    return;
  }
  nlohmann::json fields = {
      {"round", round.number}, {"steps", held}, {"bytes", regions_.bytes_held()}};
  if (replicator_) {
    const std::optional<int64_t> safe = replicator_->safe_step();
    fields["safe_step"] = safe ? nlohmann::json(*safe) : nlohmann::json(nullptr);
    fields["peer"] = replicator_->peer();
    fields["stride"] = replicator_->stride();
    fields["peer_copies"] = peer_service_->copies().steps();
    fields["copy_bytes_sent"] = copy_bytes_sent_;
    fields["copy_bytes_held"] = copy_bytes_held_;
    const auto seconds = [](std::optional<double> s) {
      return s ? nlohmann::json(*s) : nlohmann::json(nullptr);
    };
    fields["last_stage_seconds"] = seconds(replicator_->last_stage_seconds());
    fields["last_put_seconds"] = seconds(replicator_->last_put_seconds());
  }
  events_.record("checkpoints_held", std::move(fields));
}

// A job of several nodes: this node serves copies of its peers' checkpoints and copies its own to
// its peer, proving the job's token and using TLS where the job does.
void CheckpointCoordinator::start_peer_copies() {
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
          auth, entry.endpoint().address().to_string(), fs::path(regions_.path()) / "peers",
          cfg_.checkpoint_memory_limit, regions_.path(), run_tag_of(cfg_.rdzv.run_id));
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
      io_, *peer_service_, regions_.path(),
      [this](const TransferReport& r, const std::string& peer) { report_replication(r, peer); });
  replicator_->on_behind([this](bool behind, int64_t steps) { report_behind(behind, steps); });
  replicator_->on_room([this](uint64_t wanted, uint64_t freed) {
    spdlog::warn(
        "checkpoint: a worker's save needed {} bytes more of the node's budget: copies "
        "held for and kept for peers dropped, {} bytes freed",
        wanted, freed);
    events_.record("checkpoint_room_made", {{"wanted", wanted}, {"freed", freed}});
  });
  status_.replica([this] { return replica_account(); });
  if (!rdzv_->membership_fixed()) {  // spares may wait
    restore_room_ =
        std::make_unique<RestoreRoom>(io_, rdzv_, regions_, cfg_.checkpoint_memory_limit, events_);
  }
}

// The copies fell behind, or caught up again: a warning (a line) and an event, once each time.
void CheckpointCoordinator::report_behind(bool behind, int64_t steps) {
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
      replicator_->peer(), safe ? std::to_string(*safe) : "none yet", steps, replicator_->stride());
  events_.record("checkpoint_copies_behind", {{"peer", replicator_->peer()},
                                              {"safe_step", safe_step},
                                              {"steps", steps},
                                              {"stride", replicator_->stride()}});
}

// A copy of a step to the peer ended: the first to each peer, and each failure (once per reason),
// go to the log and the event log; every one to the status and the metrics.
void CheckpointCoordinator::report_replication(const TransferReport& r, const std::string& peer) {
  if (r.ok) {
    copy_bytes_sent_ += r.bytes;
    copy_bytes_held_ += r.held;
    if (std::exchange(replicating_to_, peer) == peer) return;
    spdlog::info(
        "checkpoint: step {} copied to the peer node at {} ({} bytes sent, {} bytes the peer "
        "held already, in {:.3f} s)",
        r.step, peer, r.bytes, r.held, r.took.count());
    events_.record("checkpoint_replicated", {{"step", r.step},
                                             {"peer", peer},
                                             {"bytes", r.bytes},
                                             {"held", r.held},
                                             {"seconds", r.took.count()}});
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

// What `ddprun status` shows of the copies (CheckpointStatus::account's "replica"); null before
// any copy went or came.
nlohmann::json CheckpointCoordinator::replica_account() const {
  const std::optional<int64_t> safe = replicator_->safe_step();
  const std::optional<int64_t> newest = replicator_->newest_local();
  nlohmann::json holds = nlohmann::json::object();
  for (const auto& [origin, ranks] : peer_service_->copies().steps()) {
    holds[origin] = ranks.empty() ? std::vector<int64_t>{} : ranks.front();
  }
  if (!safe && holds.empty()) return nullptr;
  const std::optional<int64_t> asks = replicator_->asks();
  return {{"peer", replicator_->peer()},
          {"safe_step", safe ? nlohmann::json(*safe) : nlohmann::json(nullptr)},
          {"lag", safe && newest ? std::max<int64_t>(0, *newest - *safe) : 0},
          {"stride", replicator_->stride()},
          {"behind", replicator_->behind()},
          {"asks_to_keep", asks ? nlohmann::json(*asks) : nlohmann::json(nullptr)},
          {"kept_for_others", replicator_->asked()},
          {"holds", std::move(holds)}};
}

// The copies in Prometheus' text: the safe step, the lag behind it and the bytes of other nodes'
// copies held here (nothing for a job of one node).
std::string CheckpointCoordinator::replication_metrics() const {
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
                                  static_cast<double>(peer_service_->copies().bytes())) +
         store::prometheus_sample(
             "ddprun_checkpoint_copy_bytes_sent_total", "counter",
             "Payload bytes of this node's checkpoint copies sent to the peer node.",
             static_cast<double>(copy_bytes_sent_)) +
         store::prometheus_sample(
             "ddprun_checkpoint_copy_bytes_held_total", "counter",
             "Payload bytes of this node's checkpoint copies not sent: the peer node held the same "
             "bytes of its own.",
             static_cast<double>(copy_bytes_held_));
}

// A copy to or from --checkpoint_dir ended: the log and the event log say how.
void CheckpointCoordinator::report_persist(const PersistReport& r) {
  nlohmann::json f = {{"local_rank", r.local_rank}, {"rank", r.rank}, {"step", r.step}};
  switch (r.kind) {
    case PersistReport::Kind::kPersisted:
    case PersistReport::Kind::kRestored:
      f["bytes"] = r.bytes;
      f["seconds"] = r.took.count();
      f["file"] = r.detail;
      if (r.kind == PersistReport::Kind::kPersisted) status_.persisted(r.step, r.took.count());
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

}  // namespace ddprun::agent
