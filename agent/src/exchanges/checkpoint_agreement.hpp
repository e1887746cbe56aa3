#pragma once
// Which checkpoint the job restores: before a round's workers start, every node publishes the
// steps each of its local ranks holds in memory (topic "checkpoint_steps", the round's scope) and
// every node computes the same answer, the newest step held by every rank of the round; where
// there is none, the same for the steps complete in --checkpoint_dir (topic
// "checkpoint_steps_on_disk"). Built on the rendezvous' exchange.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::checkpoint_agreement {

enum Where { kInMemory, kOnDisk };

// Publishes `held` (per local rank, the steps it holds `where`) and returns the newest step every
// rank of every node of `r` holds; nullopt where there is none, or where the round ended (or
// `wait` passed) before every node answered: a round that cannot agree restores nothing. Never
// throws.
boost::asio::awaitable<std::optional<int64_t>> agree(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                     rendezvous::Round r, Where where,
                                                     std::vector<std::vector<int64_t>> held,
                                                     std::chrono::milliseconds wait);

// What agree() computes from every node's published text: the newest step in every rank's list.
std::optional<int64_t> newest_common(const std::vector<std::string>& nodes, int num_nodes);

}  // namespace ddprun::agent::checkpoint_agreement
