#include "pairing.hpp"

namespace ddp::node_probe {
namespace {

// Pairs consecutive places: 0-1, 2-3, ...; the last of an odd count has none.
int pair_place(int place, int nodes) {
  const int other = place % 2 == 0 ? place + 1 : place - 1;
  return other < nodes ? other : -1;
}

}  // namespace

int partner(int rank, int nodes, int phase) {
  if (nodes < 2 || rank < 0 || rank >= nodes) return -1;
  if (phase == 0) return pair_place(rank, nodes);
  if (phase == 2) {  // the two an odd count left out, each once
    if (nodes % 2 == 0 || nodes < 3) return -1;
    if (rank == 0) return nodes - 1;
    return rank == nodes - 1 ? 0 : -1;
  }
  if (phase != 1) return -1;
  // Place of a node in phase 1: ranks 1..n-1 first, then 0.
  const int place = (rank + nodes - 1) % nodes;
  const int other_place = pair_place(place, nodes);
  if (other_place < 0) return -1;
  const int other = (other_place + 1) % nodes;
  return other == partner(rank, nodes, 0) ? -1 : other;
}

}  // namespace ddp::node_probe
