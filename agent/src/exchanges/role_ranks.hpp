#pragma once
// ROLE_RANK and ROLE_WORLD_SIZE as torch's agent computes them (torch 2.14's
// _assign_worker_ranks): every node publishes its role and its number of workers (topic "roles",
// the round's scope); a role's world size is the workers of every node of that role, and a node's
// first role rank the workers of the nodes of its role before it in node rank order. With one
// role (the usual case) they are the global rank and world size; a Slurm script's
// `--role $(hostname):` gives every node a role of its own. Built on the rendezvous' exchange.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::role_ranks {

struct RolePlace {
  int base = 0;   // the role rank of this node's first worker
  int world = 0;  // ROLE_WORLD_SIZE
};

struct NodeRole {
  int node_rank = 0;
  std::string role;
  int nproc = 0;
};

// Node `me`'s place among `nodes` (every node of the round).
RolePlace place_of(const std::vector<NodeRole>& nodes, int me);

// Publishes this node's role and workers and computes its place once every node of `r` did;
// nullopt where the round ended (or `wait` passed) first. Never throws.
boost::asio::awaitable<std::optional<RolePlace>> agree(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r, std::string role,
                                                       int nproc, std::chrono::milliseconds wait);

}  // namespace ddprun::agent::role_ranks
