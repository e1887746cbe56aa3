#pragma once
// Which in-memory checkpoint a round restores, and from where: a checkpoint is the state of one
// global rank at one step, and global rank r of the round gets what global rank r saved. Before a
// round's workers start, every node publishes (topic "checkpoint_sources", the round's scope) its
// place in the round (node rank, first global rank, workers), every slot it holds by whose state
// it is (checkpoint/slot_sources.hpp: rank, world size, step; from its regions, its kept copies
// and the copies it holds for others), where its peer service listens, and the round whose restore
// its slots follow. Slots carry no timeline: a node that was out of the job during a restore (cut
// off, then back as a spare) may hold steps that restore abandoned, under the same numbers the job
// saves again. So only the nodes of the newest timeline count; one behind drops what it holds.
// A step some rank saved twice, its state changed between (a loop that trains the restored step
// again and saves it under its number), names two states: a rank restored from a copy of the
// first save beside ranks restoring the second from their regions would resume from states of
// two timelines, silently. Such a step is restored by no rank; an older one is (the plan names it).
// Every node computes the same plan from what all published, the newest step first:
//   - the round's world size unchanged since the step was saved, and every rank's slot of it held
//     somewhere: each node gets its ranks' own slots, from itself where it holds them, else from
//     the first node (in node rank order) that does and that serves them; a rank that moved to
//     another node (a node before it was lost) is fetched like any other;
//   - the world size changed (a node lost with no spare, or one more joined), the step saved
//     through torch.distributed.checkpoint (the coordinator's slot holds the job's metadata) and
//     every saved rank's slot held somewhere: every node gathers every saved rank's slot, from
//     which its workers reshard (MemoryStorageReader);
//   - the world size changed and the step was saved with checkpoint.save (one rank's opaque state):
//     nothing moves; the workers are told the step and the world size it was saved at, and
//     load() refuses it or starts afresh (the user's choice), never restores another rank's state.
// A node fetches into a folder of its own first; only once every node says its fetches arrived
// (topic "checkpoint_restored") does any node put them into its regions, so that no node's regions
// change while another may still read them. Built on the rendezvous' exchange.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "checkpoint/slot_sources.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::checkpoint_sources {

// What one node publishes.
struct NodeCheckpoints {
  std::string id;
  int node_rank = 0;
  int base_rank = 0;  // its local rank 0's global rank in the round
  int nproc = 0;
  std::vector<HeldSlot> held;
  std::string host;  // its peer service (port 0: none)
  int port = 0;
  // The round whose restore its slots follow (SlotSources::timeline; -1: none). A node behind
  // another missed a restore that abandoned steps it may still hold (it was out of the job then,
  // and came back): what it holds is not used, and it drops all of it.
  int timeline = -1;
};

std::string to_text(const NodeCheckpoints& n);
// nullopt: not what a node publishes.
std::optional<NodeCheckpoints> from_text(const std::string& text);

// One slot a node gets before its workers start: global rank `rank`'s at the plan's step, saved at
// world size `world`, from node `holder` (itself included).
struct Fetch {
  size_t holder = 0;  // index in the round's nodes
  int rank = 0;
  int world = 0;
  bool operator==(const Fetch&) const = default;
};

struct RestorePlan {
  std::optional<int64_t> step;
  int saved_world = 0;   // the world size the step was saved at
  bool reshard = false;  // the world changed and the step is DCP's: every node gathers every rank
  std::vector<std::vector<Fetch>> fetches;  // per node of the round
  // With no step: the global ranks of the round that no node holds any step of, in order; where
  // there is none such (every rank's slots held, of no one step), each rank's newest step held
  // (rank order).
  std::vector<int> ranks_without_copy;
  std::vector<int64_t> newest_by_rank;
  // The nodes (indices) whose slots are of a timeline a later restore abandoned: behind the
  // newest NodeCheckpoints::timeline of the round. Nothing they hold is in the plan.
  std::vector<size_t> behind;
  // The steps held with two contents for one rank (the first such rank named), in order: none of
  // them is the plan's step.
  struct SavedTwice {
    int64_t step = 0;
    int rank = 0;
    auto operator<=>(const SavedTwice&) const = default;
  };
  std::vector<SavedTwice> twice;
};

// The plan for a round of `world_size` ranks whose nodes, in node rank order, published `nodes`;
// what a node behind the others holds is not used. With `before`, of the steps before it only
// (the plan of step `before` could not be carried out: a slot of it could not be fetched).
RestorePlan plan_restore(const std::vector<NodeCheckpoints>& nodes, int world_size,
                         std::optional<int64_t> before = std::nullopt);

// The nodes besides `f.holder` that can give node `to` the slot of fetch `f` at the plan's step,
// asked where its holder could not give it: those holding it that serve copies and are not
// behind, in node rank order (none is `to`: a node holding the slot itself fetches nothing).
std::vector<size_t> other_holders(const std::vector<NodeCheckpoints>& nodes,
                                  const RestorePlan& plan, size_t to, const Fetch& f);

// Publishes `mine` and returns the round's plan and every node's account (in node rank order), or
// nullopt where the round ended (or `wait` passed) before every node answered: a round that
// cannot agree restores nothing. Never throws.
struct Agreement {
  RestorePlan plan;
  std::vector<NodeCheckpoints> nodes;
};
boost::asio::awaitable<std::optional<Agreement>> agree(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r, NodeCheckpoints mine,
                                                       std::chrono::milliseconds wait);

// What the round's nodes decided to restore (same_outcome).
enum class Outcome {
  kSame,        // every node the same: the workers may start
  kNotSame,     // they differ, or a node did not answer within the wait: a restart is spent
  kRoundEnded,  // the round ended before every node said (a node left it): as any interruption
};
// Once this node decided what its workers restore (`step`; none: nothing), every node says which
// (topic "checkpoint_outcome") and learns whether all decided the same: each node decides on its
// own from what its gathers returned, and one of them can come back short on one node only (a
// read error, a wait that ran out there). Where they differ or a node did not answer within
// `wait`, the round's flag "checkpoint_outcome" is raised (its workers must not start: the round
// ends everywhere, spending a restart). Where the round ended before every node answered (a node
// left it), nothing is raised: its end is a change of membership. Never throws.
boost::asio::awaitable<Outcome> same_outcome(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                             rendezvous::Round r, std::optional<int64_t> step,
                                             std::chrono::milliseconds wait);

// Once this node's part of a phase of the restore ended, well or not: every node says which (topic
// `topic`: "checkpoint_restored" once the fetches arrived, "checkpoint_installed" once they are in
// the regions) and learns whether all did. Never throws; false where a node did not answer in
// time.
boost::asio::awaitable<bool> all_did(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                     rendezvous::Round r, std::string topic, bool ok,
                                     std::chrono::milliseconds wait);

}  // namespace ddprun::agent::checkpoint_sources
