#pragma once
// What a round's nodes tell each other of their checkpoint copies (checkpoint/replicator.hpp),
// through the rendezvous' exchange (topic "checkpoint_copies", the round's scope): the stride a
// node's copies need, and the step it asks every node to keep (its safe step, where its copies to
// its peer fell behind). Every node reads the widest stride and every step asked for. A node
// publishes only when what it says changed (a few times a job where the copies keep up), and reads
// what the store already pushed to it.
#include <memory>

#include "checkpoint/replicator.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::copy_board {

// The board of round `r`.
std::shared_ptr<CopyBoard> board(std::shared_ptr<rendezvous::Rendezvous> rdzv, rendezvous::Round r);

// What a node publishes ("STRIDE STEP", "-" for no step) and what a text read back says (nullopt:
// not what a node publishes).
std::string to_text(const CopyBoard::Said& said);
std::optional<CopyBoard::Said> from_text(const std::string& text);

}  // namespace ddprun::agent::copy_board
