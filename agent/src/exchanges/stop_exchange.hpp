#pragma once
// A node's stop by a signal, shared where it ends the whole job (a job whose membership is fixed,
// the static backend: its ranks cannot be filled): the other nodes stop their workers with the same
// signal, rather than for a lost peer, whichever reaches them first. An elastic job re-forms
// without the node instead: nothing is shared. Built on the rendezvous' exchange: the flag "stop"
// in the job's scope, its detail the signal number.
#include <memory>

#include <boost/asio/awaitable.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::stop_exchange {

// Tells the other nodes that this one (node rank `node_rank`) was stopped by `signo`. Never throws.
boost::asio::awaitable<void> announce(std::shared_ptr<rendezvous::Rendezvous> rdzv, int node_rank,
                                      int signo);
// The signal another node announced (0: none).
int peer_signal(const rendezvous::Rendezvous& rdzv);

}  // namespace ddprun::agent::stop_exchange
