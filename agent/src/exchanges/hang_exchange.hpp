#pragma once
// A hang, shared between the nodes of a round (--hang_timeout, several nodes): the node that
// declares it tells the others, so that each captures its own ranks' stacks before they stop;
// each says when it has frozen its workers, and all share their ranks' innermost frames, so that
// every node's summary groups every rank. Built on the rendezvous' exchange, in the round's scope:
// the flag "hang" (which interrupts the round on the other nodes, and makes it a failed one), and
// the topics "hang_frozen" and "hang_frames".
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::hang_exchange {

// A rank of this node is hung in `r`: every other node of the round is told. Never throws.
boost::asio::awaitable<void> announce(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                      rendezvous::Round r);
// Whether `r` is being interrupted because another node declared a hang in it.
bool peer_hang(const rendezvous::Rendezvous& rdzv, const rendezvous::Round& r);
// Once this node has frozen its workers: says so, and returns once every node of the round has,
// or `wait` has passed. Never throws.
boost::asio::awaitable<void> frozen(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                    rendezvous::Round r, std::chrono::milliseconds wait);
// Publishes this node's ranks' innermost frames (`frames`, opaque text) and returns every node's,
// this node's included, once each node of the round has published its own or `wait` has passed
// (then what came). Never throws: what cannot be shared is left out.
boost::asio::awaitable<std::vector<std::string>> frames(
    std::shared_ptr<rendezvous::Rendezvous> rdzv, rendezvous::Round r, std::string frames,
    std::chrono::milliseconds wait);

}  // namespace ddprun::agent::hang_exchange
