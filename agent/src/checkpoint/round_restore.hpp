#pragma once
// The checkpoint a round's workers restore, put in place before they start: each global rank gets
// what that rank saved, never another's. From memory where the round's nodes hold it
// (exchanges/checkpoint_sources.hpp: the plan every node computes): each node first fetches what
// it lacks (from itself or the nodes holding it) into a folder of its own, "restore/step_<S>";
// a fetch that fails is asked again, of every other node holding the slot and of its holder, in
// turns for up to 30 s (a reset connection, a holder at its cap of connections), and where a node
// still lacks a slot, every node plans the newest older step instead (nothing is in the regions
// yet); once every node says its fetches arrived, each puts its ranks' slots into their regions (a
// rank's region then holds that rank's slot only), or, where the world size changed, leaves the
// gathered slots there for its workers to reshard from. Where memory holds no step every rank can
// restore, the newest step complete in --checkpoint_dir for every rank (checkpoint_agreement).
// What is newer than the step restored (or, where none is, every slot) is dropped: the workers
// will save those step numbers again, and a slot of an abandoned timeline must never meet one of
// the new. Private to the agent.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "checkpoint/peer_service.hpp"
#include "checkpoint/persister.hpp"
#include "checkpoint/regions.hpp"
#include "checkpoint/slot_sources.hpp"
#include "ddprun/agent/agent.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "exchanges/checkpoint_sources.hpp"
#include "logs/event_log.hpp"
#include "workers/worker_env.hpp"

namespace ddprun::agent {

// What a round's restore works with, owned by the agent.
struct RestoreParts {
  const AgentConfig& cfg;
  std::shared_ptr<rendezvous::Rendezvous> rdzv;
  EventLog& events;
  const CheckpointRegions& regions;
  const SlotSources& sources;
  PeerService* peers;  // null: this node neither serves nor fetches copies
  std::string peer_host;
  CheckpointPersister* persister;  // --checkpoint_dir; null: none
  std::string node_id;             // this node's id in the round
};

struct RoundRestore {
  std::optional<CheckpointRestore> restore;  // nullopt: the workers start afresh
  // Every node's account (node rank order), where the round agreed on one: where copies go next.
  std::vector<checkpoint_sources::NodeCheckpoints> nodes;
  // What the checkpoint_restore event said (null: nothing restored), for `ddprun status`.
  nlohmann::json account;
  // Whether the round's nodes decided the same (checkpoint_sources::same_outcome). Where not, no
  // worker may start in the round and nothing was dropped (the next round decides again from all
  // held); kRoundEnded (a node left the round before every node said) spends no restart.
  checkpoint_sources::Outcome outcome = checkpoint_sources::Outcome::kSame;
};

// Agrees with the round's other nodes on what its workers restore and puts it in place; the slots
// of steps after it are dropped once every node decided the same. Never throws but for a
// cancellation (the agent stops).
boost::asio::awaitable<RoundRestore> restore_round(const RestoreParts& parts,
                                                   const rendezvous::Round& round);

}  // namespace ddprun::agent
