#pragma once
// After a hang anywhere in a round: every node's ranks grouped by their innermost frames (each
// node's through the round's exchange, hang_exchange.hpp), the rank the others wait for named,
// logged here as on every node, and added to this node's hung workers' failures (the summary).
#include <chrono>
#include <memory>

#include <boost/asio/awaitable.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"
#include "workers/worker_group.hpp"

namespace ddprun::agent {

// `r`: this node's result of the round, its workers' innermost frames in it; each node waits for
// the others' within `shutdown_timeout` and 5 s.
boost::asio::awaitable<void> summarise_hang(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                            const rendezvous::Round& round,
                                            std::chrono::milliseconds shutdown_timeout,
                                            GroupResult& r);

}  // namespace ddprun::agent
