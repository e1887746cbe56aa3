#pragma once
// The node's in-memory checkpoints as one part of the agent: the workers' regions and the node's
// budget, --checkpoint_dir's persister, in a job of several nodes the peer service and the
// replicator, and what `ddprun status`, the metrics and the event log say of them. The round loop
// asks it for a round's restore, tells it when a round's workers start and end, and waits for its
// copies to disk when the job ends; it owns everything it reports on, so the loop holds no
// checkpoint state. Lives on the agent's io_context, from the agent's setup to its teardown.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "checkpoint/checkpoint_status.hpp"
#include "checkpoint/peer_service.hpp"
#include "checkpoint/persister.hpp"
#include "checkpoint/regions.hpp"
#include "checkpoint/replicator.hpp"
#include "checkpoint/restore_room.hpp"
#include "checkpoint/slot_sources.hpp"
#include "ddprun/agent/agent.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "exchanges/checkpoint_sources.hpp"
#include "logs/event_log.hpp"
#include "workers/round_plan.hpp"

namespace ddprun::agent {

// The nodes of a round decided on different checkpoint steps to restore (restore_for), or did not
// all say: `round_ended` where the round ended before they did (a node left it).
class RestoreDisagreed : public std::runtime_error {
 public:
  RestoreDisagreed(const std::string& what, bool round_ended)
      : std::runtime_error(what), round_ended_(round_ended) {}
  // Whether the round's end, not a disagreement, stopped it: it spends no restart.
  bool round_ended() const { return round_ended_; }

 private:
  bool round_ended_;
};

class CheckpointCoordinator {
 public:
  // The regions' folder made for `cfg`'s run, its budget taken from `cfg.checkpoint_memory_limit`
  // where given, else half the size of the file system holding it (both written back into `cfg`,
  // which must outlive this). Throws std::exception where the folder cannot be made.
  CheckpointCoordinator(boost::asio::io_context& io, AgentConfig& cfg,
                        std::shared_ptr<rendezvous::Rendezvous> rdzv, EventLog& events);
  CheckpointCoordinator(const CheckpointCoordinator&) = delete;
  CheckpointCoordinator& operator=(const CheckpointCoordinator&) = delete;
  ~CheckpointCoordinator();

  // The folder of the workers' regions (DDPRUN_CHECKPOINT_DIR).
  const std::string& path() const { return regions_.path(); }
  // The environment the workers get for their checkpoints: the folder and the budget.
  void add_worker_environment(std::map<std::string, std::string>& env) const;
  // The copies to --checkpoint_dir and, in a job of several nodes, to and from the peer node
  // start (once, after the setup).
  void start();
  // The agent's first lines: the budget.
  void say_budget() const;
  // The checkpoints' metrics, in Prometheus' text.
  std::string metrics() const;

  // The node joined the job: without a token, the peer copies prove the job's secret.
  boost::asio::awaitable<void> joined();
  // The checkpoint `round`'s workers restore, agreed with its other nodes and put in place; then
  // this node's copies go to its peer of the round. Throws RestoreDisagreed where the round's
  // nodes did not decide the same (no worker may start in it; the round's flag ends it on every
  // node).
  boost::asio::awaitable<std::optional<CheckpointRestore>> restore_for(
      const rendezvous::Round& round);
  // `round`'s workers start.
  void round_started(const rendezvous::Round& round);
  // The node waits as a spare (Rendezvous::on_spare): it holds memory for the restore it would
  // make in a lost node's place (restore_room.hpp) until a round forms with it.
  void waiting_as_spare();
  // A round formed with this node in it: a spare holds no more (what it holds stays for the
  // restore), so that its node check and its restore run on a quiet node.
  void round_formed();
  // The round's workers begin to stop before they ended on their own (a failure here or on
  // another node, a node that left or joined, a hang, a signal): the copies stop now rather than
  // once they ended, so that a stage of a step the next round does not need leaves the machine to
  // the workers' exit and the restore (a lost node's copies are fetched from here). The workers'
  // requests for room are still answered until they ended.
  void workers_stopping();
  // `round`'s workers ended: the copies stop (what the next round restores stays put), the event
  // log says what the node holds, and where workers failed the newest step goes to disk.
  void round_ended(const rendezvous::Round& round, bool workers_failed);
  // The job ended (not stopped): its newest checkpoint goes to --checkpoint_dir too, waited for
  // (bounded; a stop ends the wait).
  boost::asio::awaitable<void> job_ended();
  // Teardown, once the job's coroutine ended: ticks, copies under way and the peer service end.
  void stop();

 private:
  void start_peer_copies();
  void report_behind(bool behind, int64_t steps);
  void report_replication(const TransferReport& r, const std::string& peer);
  void report_persist(const PersistReport& r);
  nlohmann::json replica_account() const;
  std::string replication_metrics() const;
  void record_held(const rendezvous::Round& round);
  void copy_to_peer(const rendezvous::Round& round,
                    const std::vector<checkpoint_sources::NodeCheckpoints>& nodes);

  boost::asio::io_context& io_;
  AgentConfig& cfg_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  EventLog& events_;
  CheckpointRegions regions_;
  bool budget_given_ = false;  // --checkpoint_memory_limit given (else its default)
  CheckpointStatus status_;    // for `ddprun status`
  std::unique_ptr<CheckpointPersister> persister_;  // --checkpoint_dir
  std::unique_ptr<PeerService> peer_service_;       // several nodes: copies to and from peers
  std::unique_ptr<RestoreRoom> restore_room_;       // with a peer service, where spares may wait
  // Without a peer service: the slots this node holds (its regions and kept copies).
  SlotSources local_sources_;
  std::unique_ptr<CheckpointReplicator> replicator_;
  std::string peer_host_;
  std::string replicating_to_;    // the peer the last copy reached ("" none, or it failed)
  uint64_t copy_bytes_sent_ = 0;  // payload bytes of copies sent to peers, and those they held
  uint64_t copy_bytes_held_ = 0;
  std::string replication_failure_;  // the last copy's failure, said once
};

}  // namespace ddprun::agent
