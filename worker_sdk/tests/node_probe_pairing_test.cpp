// The node check's pairing: each phase pairs nodes both ways, phase 1 gives every node with two
// partners two different ones, and a node left out in one phase is measured in the other.
#include <catch2/catch.hpp>

#include <vector>

#include "pairing.hpp"

using ddp::node_probe::kPhases;
using ddp::node_probe::partner;

TEST_CASE("node check pairing is symmetric in every phase, for 1 to 64 nodes", "[node_check]") {
  for (int nodes = 1; nodes <= 64; ++nodes) {
    for (int phase = 0; phase < kPhases; ++phase) {
      for (int rank = 0; rank < nodes; ++rank) {
        const int p = partner(rank, nodes, phase);
        if (p < 0) continue;
        INFO("nodes " << nodes << " phase " << phase << " rank " << rank);
        CHECK(p != rank);
        CHECK(p < nodes);
        CHECK(partner(p, nodes, phase) == rank);
      }
    }
  }
}

TEST_CASE("node check pairing: every node of three or more has two different partners",
          "[node_check]") {
  CHECK(partner(0, 4, 0) == 1);
  CHECK(partner(2, 4, 0) == 3);
  CHECK(partner(0, 4, 1) == 3);
  CHECK(partner(1, 4, 1) == 2);
  for (int nodes = 3; nodes <= 64; ++nodes) {
    for (int rank = 0; rank < nodes; ++rank) {
      std::vector<int> partners;
      for (int phase = 0; phase < kPhases; ++phase) {
        if (const int p = partner(rank, nodes, phase); p >= 0) partners.push_back(p);
      }
      INFO("nodes " << nodes << " rank " << rank);
      REQUIRE(partners.size() == 2);
      CHECK(partners[0] != partners[1]);
    }
  }
}

TEST_CASE("node check pairing: two nodes measure their one link once, one node none",
          "[node_check]") {
  CHECK(partner(0, 2, 0) == 1);
  CHECK(partner(1, 2, 0) == 0);
  CHECK(partner(0, 2, 1) == -1);
  CHECK(partner(1, 2, 1) == -1);
  CHECK(partner(0, 1, 0) == -1);
  CHECK(partner(5, 4, 0) == -1);
  CHECK(partner(0, 4, 2) == -1);  // an even count: no third phase
  CHECK(partner(0, 3, 2) == 2);
  CHECK(partner(2, 3, 2) == 0);
  CHECK(partner(1, 3, 2) == -1);
  CHECK(partner(0, 5, 3) == -1);
}
