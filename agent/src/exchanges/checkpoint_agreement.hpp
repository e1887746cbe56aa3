#pragma once
// Which checkpoint in --checkpoint_dir the job restores when memory holds none for it
// (checkpoint_sources.hpp decides that): every node publishes the steps complete on disk for each
// of its local ranks' global ranks (topic "checkpoint_steps_on_disk", the round's scope) and every
// node computes the same answer, the newest step every rank of the round has. Built on the
// rendezvous' exchange.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::checkpoint_agreement {

// Publishes `held` (per local rank, the steps complete on disk) and returns the newest step every
// rank of every node of `r` has; nullopt where there is none, or where the round ended (or `wait`
// passed) before every node answered: a round that cannot agree restores nothing. Never throws.
boost::asio::awaitable<std::optional<int64_t>> agree(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                     rendezvous::Round r,
                                                     std::vector<std::vector<int64_t>> held,
                                                     std::chrono::milliseconds wait);

// What agree() computes from every node's published text: the newest step in every rank's list.
std::optional<int64_t> newest_common(const std::vector<std::string>& nodes, int num_nodes);

}  // namespace ddprun::agent::checkpoint_agreement
