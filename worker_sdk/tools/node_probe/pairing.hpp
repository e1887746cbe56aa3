#pragma once
// Which node each node measures its link with in each phase of the node check. Phase 0 pairs the
// nodes in rank order (0-1, 2-3, ...); phase 1 pairs them again after moving every node one place
// along (1-2, 3-4, ..., n-1 with 0), so that a node whose link is slow is slow with two partners
// while each of its partners is slow with one. With an odd count, phase 0 leaves n-1 out and phase
// 1 leaves 0 out: phase 2 pairs those two, so that every node of three or more is measured twice.
namespace ddp::node_probe {

inline constexpr int kPhases = 3;

// The partner of `rank` among `nodes` in `phase`; -1 for none (a node out of the phase, or a pair
// measured already, as with two nodes).
int partner(int rank, int nodes, int phase);

}  // namespace ddp::node_probe
