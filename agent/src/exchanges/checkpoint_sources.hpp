#pragma once
// Which in-memory checkpoint a round restores, and from where. Before a round's workers start,
// every node publishes (topic "checkpoint_sources", the round's scope) what it has: its id, the
// steps each of its local ranks holds in its own regions, the copies it holds for other nodes
// (checkpoint/peer_service.hpp) and where its peer service listens. Every node computes the same
// plan from what all published:
//   - a node's local rank can restore a step its region holds, or one another node holds a copy
//     of for it;
//   - a node that has neither (it just joined: a spare or a replacement) takes the place of a node
//     that left the job and whose copies another node still holds (the first such, by id), rank
//     for rank;
//   - the step restored is the newest every local rank of every node can restore;
//   - a rank whose region does not hold it gets it from the node holding its copy (or the copy
//     its own node kept of what its peer holds) before the workers start; every node says whether
//     its ranks hold it now (topic "checkpoint_restored"), and the round restores from memory only
//     if all do.
// Built on the rendezvous' exchange. With no copies anywhere this is the newest step every rank's
// own region holds.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::checkpoint_sources {

// What one node publishes.
struct NodeCheckpoints {
  std::string id;
  std::vector<std::vector<int64_t>> local;  // per local rank of the round, oldest first
  std::map<std::string, std::vector<std::vector<int64_t>>> holds;  // per origin, per local rank
  std::string host;  // its peer service (port 0: none)
  int port = 0;
};

std::string to_text(const NodeCheckpoints& n);
// nullopt: not what a node publishes.
std::optional<NodeCheckpoints> from_text(const std::string& text);

// One rank's copy a node gets before its workers start.
struct Fetch {
  size_t holder = 0;   // the node (index in the round) that holds it
  std::string origin;  // whose copy it is
  int origin_local = 0;
  int local = 0;  // into this local rank's region
  bool operator==(const Fetch&) const = default;
};

struct RestorePlan {
  std::optional<int64_t> step;
  std::vector<std::vector<Fetch>> fetches;  // per node of the round
  std::vector<std::string> adopted;         // per node: the origin whose copies it takes, or ""
  // With no step: the global ranks that have no step at all (those a --checkpoint_dir must
  // supply), in order.
  std::vector<int> ranks_without_copy;
};

// The plan for a round whose nodes, in node order, published `nodes`.
RestorePlan plan_restore(const std::vector<NodeCheckpoints>& nodes);

// Publishes `mine` and returns the round's plan and every node's account (in node rank order,
// by the round's members), or
// nullopt where the round ended (or `wait` passed) before every node answered: a round that
// cannot agree restores nothing. Never throws.
struct Agreement {
  RestorePlan plan;
  std::vector<NodeCheckpoints> nodes;
};
boost::asio::awaitable<std::optional<Agreement>> agree(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r, NodeCheckpoints mine,
                                                       std::chrono::milliseconds wait);

// Once this node's ranks hold the plan's step (fetched, or put back from the copy kept here),
// or could not: every node says which (topic "checkpoint_restored") and learns whether all did.
// Never throws; false where a node did not answer in time.
boost::asio::awaitable<bool> all_fetched(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                         rendezvous::Round r, bool ok,
                                         std::chrono::milliseconds wait);

}  // namespace ddprun::agent::checkpoint_sources
