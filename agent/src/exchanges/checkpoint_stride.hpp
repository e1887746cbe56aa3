#pragma once
// The stride of a round's checkpoint copies (checkpoint/replicator.hpp), agreed through the
// rendezvous' exchange: a node whose copies need a wider stride publishes it (topic
// "checkpoint_stride", the round's scope); every node reads the widest. A node publishes only when
// its wish grows (a few times a job), and reads what the store already pushed to it.
#include <memory>

#include "checkpoint/replicator.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::checkpoint_stride {

// The board of round `r`.
std::shared_ptr<StrideBoard> board(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                   rendezvous::Round r);

}  // namespace ddprun::agent::checkpoint_stride
