// What the agent reads of the in-memory checkpoints: the steps a region's header says are
// committed, and the step every rank of a round holds.
#include <cstring>
#include <string>

#include <catch2/catch.hpp>

#include "checkpoint/regions.hpp"
#include "exchanges/checkpoint_agreement.hpp"

using namespace ddprun::agent;

namespace {

// A region header as ddprun/checkpoint.py writes it: two slot records of (state, step, size,
// checksum, sequence, structure size).
std::string header(uint64_t state0, int64_t step0, uint64_t seq0, uint64_t state1, int64_t step1,
                   uint64_t seq1) {
  std::string h(4096, '\0');
  std::memcpy(h.data(), "DDPCKPT1", 8);
  const auto put = [&h](size_t at, uint64_t v) { std::memcpy(h.data() + at, &v, sizeof v); };
  put(64, state0);
  put(72, static_cast<uint64_t>(step0));
  put(96, seq0);
  put(128, state1);
  put(136, static_cast<uint64_t>(step1));
  put(160, seq1);
  return h;
}

}  // namespace

TEST_CASE("checkpoint regions: committed steps come oldest first, others not at all",
          "[checkpoint]") {
  CHECK(CheckpointRegions::committed_steps(header(2, 8, 5, 2, 7, 4)) == std::vector<int64_t>{7, 8});
  // A slot being written (1) or empty (0) holds nothing that counts.
  CHECK(CheckpointRegions::committed_steps(header(2, 8, 5, 1, 9, 0)) == std::vector<int64_t>{8});
  CHECK(CheckpointRegions::committed_steps(header(0, 0, 0, 0, 0, 0)).empty());
  std::string torn = header(2, 8, 5, 2, 7, 4);
  torn[0] = 'X';  // not a region
  CHECK(CheckpointRegions::committed_steps(torn).empty());
  CHECK(CheckpointRegions::committed_steps("DDPCKPT1").empty());  // too short
}

TEST_CASE("checkpoint agreement: the newest step held by every rank of every node",
          "[checkpoint]") {
  using checkpoint_agreement::newest_common;
  CHECK(newest_common({"[[4,5],[5,6]]", "[[5,6],[5,6]]"}, 2) == 5);
  CHECK(newest_common({"[[6,7],[6,7]]"}, 1) == 7);
  CHECK_FALSE(newest_common({"[[4,5],[6,7]]"}, 1).has_value());  // nothing in common
  CHECK_FALSE(newest_common({"[[5,6],[]]"}, 1).has_value());     // a rank without a checkpoint
  CHECK_FALSE(newest_common({"[[5,6]]"}, 2).has_value());        // a node did not say
  CHECK_FALSE(newest_common({"[[5,6]]", "not json"}, 2).has_value());
  CHECK_FALSE(newest_common({"[]"}, 1).has_value());
}
