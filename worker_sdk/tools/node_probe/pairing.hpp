#pragma once
// Which node each node measures its link with in each phase of the node check. Phase 0 pairs the
// nodes in rank order (0-1, 2-3, ...); phase 1 pairs them again after moving every node one place
// along (1-2, 3-4, ..., n-1 with 0), so that a node whose link is slow is slow with two partners
// while each of its partners is slow with one.
namespace ddp::node_probe {

inline constexpr int kPhases = 2;

// The partner of `rank` among `nodes` in `phase`; -1 for none (an odd node out, or a pair phase 0
// measured already, as with two nodes).
int partner(int rank, int nodes, int phase);

}  // namespace ddp::node_probe
