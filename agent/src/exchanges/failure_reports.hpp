#pragma once
// Every node's worker failures, shared so that each node's summary names every failed rank of the
// job: a node whose workers failed publishes them (failure_json.hpp) under
// rendezvous::kFailureReportsTopic in the scope of its round's restart count, and ends the round as
// failed; once no restart remains, each node reads those of the round that spent the last one.
// Built on the rendezvous' exchange.
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::failure_reports {

// Publishes this node's worker failures in `r` (`failures`, JSON) and ends `r` as failed. Throws
// StoreError when the store is lost.
boost::asio::awaitable<void> report(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                    rendezvous::Round r, std::string failures);
// Tells every node at once that a worker of this node failed in `r`: a flag of the round's, which
// interrupts it on every node. For an in-process restart, where this node's other workers park
// before `r` ends here, while the other nodes' ranks, whose collectives failed with this node's
// worker, wait for their agents' abort only briefly before they count the failure as their own.
// Never throws.
boost::asio::awaitable<void> announce(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                      rendezvous::Round r);
// Every node's failures (as reported) in the round that failed with restart count `restart_count`
// (with `max_restarts`: the round that spent the last restart). Never throws: what cannot be read
// is left out.
boost::asio::awaitable<std::vector<std::string>> reported(
    std::shared_ptr<rendezvous::Rendezvous> rdzv, int restart_count);

}  // namespace ddprun::agent::failure_reports
