// Which in-memory checkpoint a round restores, and from where (exchanges/checkpoint_sources.hpp):
// the plan every node computes from what every node published. Global rank r of the round always
// gets what global rank r saved.
#include <catch2/catch.hpp>

#include "exchanges/checkpoint_sources.hpp"

using namespace ddprun::agent;
using namespace ddprun::agent::checkpoint_sources;

namespace {

// Node `node_rank` of a round, its ranks base..base+nproc-1, holding `held` ({rank, world, step}).
NodeCheckpoints node(int node_rank, int base, int nproc,
                     std::vector<std::tuple<int, int, int64_t>> held, bool serves = true) {
  NodeCheckpoints n;
  n.id = "node" + std::to_string(node_rank);
  n.node_rank = node_rank;
  n.base_rank = base;
  n.nproc = nproc;
  for (const auto& [rank, world, step] : held) {
    n.held.push_back(HeldSlot{rank, world, step, 64, false, 0xc0ffee});
  }
  n.host = "10.0.0." + std::to_string(node_rank + 1);
  n.port = serves ? 4000 : 0;
  return n;
}

}  // namespace

TEST_CASE("checkpoint sources: what a node publishes reads back, and anything else is refused",
          "[checkpoint_sources]") {
  NodeCheckpoints n = node(2, 4, 2, {{4, 6, 5}, {5, 6, 5}});
  n.held[0].dcp_metadata = true;
  n.held[1].state = 0xfedcba9876543210;
  n.timeline = 7;
  const std::optional<NodeCheckpoints> back = from_text(to_text(n));
  REQUIRE(back);
  CHECK(back->id == "node2");
  CHECK(back->node_rank == 2);
  CHECK(back->base_rank == 4);
  CHECK(back->nproc == 2);
  CHECK(back->held == n.held);
  CHECK(back->port == 4000);
  CHECK(back->timeline == 7);
  for (const char* bad :
       {"", "[]", "{\"id\":1}",
        "{\"id\":\"a\",\"node_rank\":0,\"base_rank\":0,\"nproc\":1,\"held\":[[1]],"
        "\"host\":\"h\",\"port\":1,\"timeline\":0}",
        "{\"id\":\"a\",\"node_rank\":-1,\"base_rank\":0,\"nproc\":1,\"held\":[],"
        "\"host\":\"h\",\"port\":1,\"timeline\":0}",
        "{\"id\":\"a\",\"node_rank\":0,\"base_rank\":0,\"nproc\":1,\"held\":[],"
        "\"host\":\"h\",\"port\":1}"}) {
    CHECK_FALSE(from_text(bad));
  }
}

TEST_CASE("checkpoint sources: every rank restores its own slot from its own node where it can",
          "[checkpoint_sources]") {
  // Two nodes of two ranks; each holds its ranks' steps 4-6 (node 0 lacks rank 1's 6).
  const RestorePlan p = plan_restore({node(0, 0, 2, {{0, 4, 5}, {0, 4, 6}, {1, 4, 5}}),
                                      node(1, 2, 2, {{2, 4, 5}, {2, 4, 6}, {3, 4, 5}, {3, 4, 6}})},
                                     4);
  REQUIRE(p.step == 5);
  CHECK(p.saved_world == 4);
  CHECK_FALSE(p.reshard);
  CHECK(p.fetches[0] == std::vector<Fetch>{{0, 0, 4}, {0, 1, 4}});
  CHECK(p.fetches[1] == std::vector<Fetch>{{1, 2, 4}, {1, 3, 4}});
  // A fresh job: nothing anywhere.
  const RestorePlan none = plan_restore({node(0, 0, 2, {}), node(1, 2, 1, {})}, 3);
  CHECK_FALSE(none.step);
  CHECK(none.ranks_without_copy.empty());
}

TEST_CASE(
    "checkpoint sources: after the middle node's loss each rank gets its own, not its "
    "node's old one",
    "[checkpoint_sources]") {
  // Three nodes of one rank, copies in a ring (node k's to node k+1). The node of rank 1 was lost:
  // the survivors moved down (rank 2's node is now node 1) and a replacement is node 2. Node 0
  // holds rank 0's own and rank 2's copy; the old node 2 (now node 1) holds rank 2's own and rank
  // 1's copy. Rank 1 now runs on node 1, which must get rank 1's slot (its copy, held there), and
  // rank 2 on the newcomer, which must fetch rank 2's slot from a node that holds it.
  const RestorePlan p = plan_restore({node(0, 0, 1, {{0, 3, 4}, {2, 3, 4}}),
                                      node(1, 1, 1, {{2, 3, 4}, {1, 3, 4}}), node(2, 2, 1, {})},
                                     3);
  REQUIRE(p.step == 4);
  CHECK(p.fetches[0] == std::vector<Fetch>{{0, 0, 3}});
  CHECK(p.fetches[1] == std::vector<Fetch>{{1, 1, 3}});  // its own node holds rank 1's copy
  CHECK(p.fetches[2] == std::vector<Fetch>{{0, 2, 3}});  // the first holder that serves
}

TEST_CASE("checkpoint sources: a slot is fetched only from a node that serves copies",
          "[checkpoint_sources]") {
  const RestorePlan p =
      plan_restore({node(0, 0, 1, {{1, 2, 7}}, false), node(1, 1, 1, {{0, 2, 7}, {1, 2, 7}})}, 2);
  REQUIRE(p.step == 7);
  CHECK(p.fetches[0] == std::vector<Fetch>{{1, 0, 2}});
  // Nobody serving rank 0's slot to node 0: no step.
  const RestorePlan stuck =
      plan_restore({node(0, 0, 1, {{1, 2, 7}}), node(1, 1, 1, {{0, 2, 7}}, false)}, 2);
  CHECK_FALSE(stuck.step);
}

TEST_CASE(
    "checkpoint sources: a fetch that failed is asked of the other serving nodes holding the slot",
    "[checkpoint_sources]") {
  // Rank 2's step 4 is held by nodes 0, 1 (not serving) and 3; node 2 (rank 2's) holds none.
  const std::vector<NodeCheckpoints> nodes = {
      node(0, 0, 1, {{0, 4, 4}, {2, 4, 4}}), node(1, 1, 1, {{1, 4, 4}, {2, 4, 4}}, false),
      node(2, 2, 1, {}), node(3, 3, 1, {{3, 4, 4}, {2, 4, 4}, {2, 4, 3}})};
  const RestorePlan p = plan_restore(nodes, 4);
  REQUIRE(p.step == 4);
  REQUIRE(p.fetches[2] == std::vector<Fetch>{{0, 2, 4}});
  CHECK(other_holders(nodes, p, 2, p.fetches[2][0]) == std::vector<size_t>{3});
  // Held by its holder alone: no other to ask.
  CHECK(other_holders(nodes, p, 3, Fetch{3, 3, 4}).empty());
  // Another step of the slot does not count: node 0 with rank 2's step 3 only.
  std::vector<NodeCheckpoints> older = nodes;
  older[0].held[1].step = 3;
  const RestorePlan o = plan_restore(older, 4);
  REQUIRE(o.step == 4);
  REQUIRE(o.fetches[2] == std::vector<Fetch>{{3, 2, 4}});
  CHECK(other_holders(older, o, 2, o.fetches[2][0]).empty());
  // A node behind the others' timeline is not asked.
  std::vector<NodeCheckpoints> later = nodes;
  for (size_t n : {0, 1, 2}) later[n].timeline = 5;
  later[0].held.push_back(HeldSlot{3, 4, 4, 64, false, 0xc0ffee});  // rank 3's, beside node 3's
  const RestorePlan q = plan_restore(later, 4);
  CHECK(q.behind == std::vector<size_t>{3});
  REQUIRE(q.step == 4);
  CHECK(other_holders(later, q, 2, q.fetches[2][0]).empty());
}

TEST_CASE(
    "checkpoint sources: a step whose slots could not be fetched gives way to the newest older one",
    "[checkpoint_sources]") {
  // Steps 4 and 5 of both ranks; rank 1's step 3 only on node 1.
  const std::vector<NodeCheckpoints> nodes = {
      node(0, 0, 1, {{0, 2, 4}, {0, 2, 5}, {1, 2, 4}, {1, 2, 5}}),
      node(1, 1, 1, {{1, 2, 3}, {1, 2, 4}, {1, 2, 5}, {0, 2, 3}})};
  CHECK(plan_restore(nodes, 2).step == 5);
  const RestorePlan p = plan_restore(nodes, 2, 5);
  REQUIRE(p.step == 4);
  CHECK(p.fetches[1] == std::vector<Fetch>{{1, 1, 2}});
  CHECK(plan_restore(nodes, 2, 4).step == 3);
  CHECK_FALSE(plan_restore(nodes, 2, 3).step);
}

TEST_CASE("checkpoint sources: the newest step every rank has wins, older ones are not mixed in",
          "[checkpoint_sources]") {
  // Rank 1 holds 8 and 9, rank 0 only 7 and 8: step 8, each rank its own.
  const RestorePlan p = plan_restore(
      {node(0, 0, 1, {{0, 2, 7}, {0, 2, 8}, {1, 2, 8}}), node(1, 1, 1, {{1, 2, 9}})}, 2);
  REQUIRE(p.step == 8);
  CHECK(p.fetches[1] == std::vector<Fetch>{{0, 1, 2}});
}

TEST_CASE(
    "checkpoint sources: a step saved twice with different contents is restored by no rank, an "
    "older one is",
    "[checkpoint_sources]") {
  // Every rank saved 5 and 6; rank 0 then saved 6 again (its region holds both saves), and node 1
  // holds rank 1's copy of the first save of 6, node 0 the second's: 6 names two states.
  NodeCheckpoints a = node(0, 0, 1, {{0, 2, 5}, {0, 2, 6}, {0, 2, 6}, {1, 2, 5}, {1, 2, 6}});
  NodeCheckpoints b = node(1, 1, 1, {{1, 2, 5}, {1, 2, 6}, {0, 2, 5}, {0, 2, 6}});
  a.held[2].state = 0x5eed;
  a.held[4].state = 0x5eed;
  RestorePlan p = plan_restore({a, b}, 2);
  REQUIRE(p.step == 5);
  CHECK(p.twice == std::vector<RestorePlan::SavedTwice>{{6, 0}});
  CHECK(p.fetches[0] == std::vector<Fetch>{{0, 0, 2}});
  CHECK(p.fetches[1] == std::vector<Fetch>{{1, 1, 2}});

  // Across nodes too: the lost node's copy on node 1 is of the first save, node 0's region of
  // the second.
  b.held[3].state = 0x5eed;
  a.held.erase(a.held.begin() + 1);
  p = plan_restore({a, b}, 2);
  CHECK(p.step == 5);
  CHECK(p.twice == std::vector<RestorePlan::SavedTwice>{{6, 1}});

  // The same state saved twice under one number is one slot: restored.
  for (HeldSlot& h : a.held) h.state = 0xc0ffee;
  for (HeldSlot& h : b.held) h.state = 0xc0ffee;
  p = plan_restore({a, b}, 2);
  CHECK(p.step == 6);
  CHECK(p.twice.empty());

  // No step left once the only one is ambiguous.
  p = plan_restore({node(0, 0, 1, {{0, 1, 3}, {0, 1, 3}})}, 1);
  CHECK(p.step);
  NodeCheckpoints only = node(0, 0, 1, {{0, 1, 3}, {0, 1, 3}});
  only.held[1].state = 1;
  p = plan_restore({only}, 1);
  CHECK_FALSE(p.step);
  CHECK(p.twice == std::vector<RestorePlan::SavedTwice>{{3, 0}});
}

TEST_CASE("checkpoint sources: slots lost with their nodes leave no step, naming the ranks",
          "[checkpoint_sources]") {
  const RestorePlan p =
      plan_restore({node(0, 0, 1, {{0, 3, 5}}), node(1, 1, 1, {{1, 3, 5}}), node(2, 2, 1, {})}, 3);
  CHECK_FALSE(p.step);
  CHECK(p.ranks_without_copy == std::vector<int>{2});
  CHECK(p.newest_by_rank.empty());
}

TEST_CASE(
    "checkpoint sources: every rank held, of no one step, leaves no step, naming each "
    "rank's newest",
    "[checkpoint_sources]") {
  // A lost node's copies stopped at step 5 (node 1 holds them); its survivor kept 8 and 9 only.
  const RestorePlan p = plan_restore(
      {node(0, 0, 1, {}), node(1, 1, 1, {{0, 2, 4}, {0, 2, 5}, {1, 2, 8}, {1, 2, 9}})}, 2);
  CHECK_FALSE(p.step);
  CHECK(p.ranks_without_copy.empty());
  CHECK(p.newest_by_rank == std::vector<int64_t>{5, 9});
  // Where a step all have exists, none of that is said.
  const RestorePlan q =
      plan_restore({node(0, 0, 1, {}), node(1, 1, 1, {{0, 2, 5}, {1, 2, 5}, {1, 2, 9}})}, 2);
  CHECK(q.step == 5);
  CHECK(q.newest_by_rank.empty());
  // A step all have, but saved twice by one rank: the plan says that, not this.
  NodeCheckpoints twice = node(1, 1, 1, {{0, 2, 5}, {1, 2, 5}, {1, 2, 5}});
  twice.held[2].state = 1;
  const RestorePlan t = plan_restore({node(0, 0, 1, {}), twice}, 2);
  CHECK_FALSE(t.step);
  CHECK(t.twice == std::vector<RestorePlan::SavedTwice>{{5, 1}});
  CHECK(t.newest_by_rank.empty());
}

TEST_CASE("checkpoint sources: a world that shrank reshards a DCP step from every saved rank",
          "[checkpoint_sources]") {
  // Three ranks saved step 6 through DCP (rank 0's slot holds the job's metadata); one node is
  // gone, its copy kept by node 0. Two ranks now: every node gathers all three saved slots.
  NodeCheckpoints a = node(0, 0, 1, {{0, 3, 6}, {2, 3, 6}});
  a.held[0].dcp_metadata = true;
  const RestorePlan p = plan_restore({a, node(1, 1, 1, {{1, 3, 6}, {0, 3, 6}})}, 2);
  REQUIRE(p.step == 6);
  CHECK(p.saved_world == 3);
  CHECK(p.reshard);
  CHECK(p.fetches[0] == std::vector<Fetch>{{0, 0, 3}, {1, 1, 3}, {0, 2, 3}});
  CHECK(p.fetches[1] == std::vector<Fetch>{{1, 0, 3}, {1, 1, 3}, {0, 2, 3}});
}

TEST_CASE(
    "checkpoint sources: a world that changed with a plain step gives each rank it had its own",
    "[checkpoint_sources]") {
  // checkpoint.save's state is one rank's: ranks 0 and 1 of the new world of 3 get what ranks 0
  // and 1 saved in the world of 2; rank 2 has no counterpart and gets nothing.
  const RestorePlan p = plan_restore({node(0, 0, 1, {{0, 2, 6}, {1, 2, 6}}), node(1, 1, 2, {})}, 3);
  REQUIRE(p.step == 6);
  CHECK(p.saved_world == 2);
  CHECK_FALSE(p.reshard);
  CHECK(p.fetches[0] == std::vector<Fetch>{{0, 0, 2}});
  CHECK(p.fetches[1] == std::vector<Fetch>{{0, 1, 2}});
  // A shrink needs only the ranks that remain: rank 2's slot, lost, is not needed.
  const RestorePlan shrunk =
      plan_restore({node(0, 0, 1, {{0, 3, 6}}), node(1, 1, 1, {{1, 3, 6}})}, 2);
  REQUIRE(shrunk.step == 6);
  CHECK(shrunk.saved_world == 3);
}

TEST_CASE("checkpoint sources: a step at the round's own world size is preferred at equal steps",
          "[checkpoint_sources]") {
  NodeCheckpoints a = node(0, 0, 1, {{0, 3, 6}, {1, 3, 6}, {2, 3, 6}, {0, 2, 6}, {1, 2, 6}});
  a.held[0].dcp_metadata = true;
  const RestorePlan p = plan_restore({a, node(1, 1, 1, {})}, 2);
  REQUIRE(p.step == 6);
  CHECK(p.saved_world == 2);
  CHECK_FALSE(p.reshard);
}

TEST_CASE(
    "checkpoint sources: a node back from outside the job during a restore gives nothing of what "
    "it holds, and its ranks are fetched from the others",
    "[checkpoint_sources]") {
  // Round 3 restored step 10 on nodes 0 and 1 while node 2 was cut off; node 2 still holds its
  // ranks' steps 11 and 12 of the abandoned timeline and node 1's copies of them, and the job saved
  // 11 and 12 again since. Node 2 now takes a lost node's place.
  NodeCheckpoints a = node(0, 0, 1, {{0, 3, 10}, {0, 3, 11}, {0, 3, 12}, {1, 3, 11}, {2, 3, 11}});
  NodeCheckpoints b = node(1, 1, 1, {{1, 3, 10}, {1, 3, 11}, {1, 3, 12}, {0, 3, 11}});
  NodeCheckpoints back = node(2, 2, 1, {{2, 3, 11}, {2, 3, 12}, {1, 3, 12}, {0, 3, 12}});
  a.timeline = b.timeline = 3;
  back.timeline = 1;
  const RestorePlan p = plan_restore({a, b, back}, 3);
  CHECK(p.behind == std::vector<size_t>{2});
  // Step 12 is everywhere, but rank 2's is only on the node behind: step 11, rank 2's from node 0.
  REQUIRE(p.step == 11);
  CHECK(p.fetches[2] == std::vector<Fetch>{{0, 2, 3}});
  // The same nodes all of one timeline: step 12, rank 2's own.
  back.timeline = 3;
  const RestorePlan same = plan_restore({a, b, back}, 3);
  CHECK(same.behind.empty());
  CHECK(same.step == 12);
  // A spare that never restored and holds nothing is behind too, harmlessly.
  const RestorePlan spare = plan_restore({a, b, node(2, 2, 1, {})}, 3);
  CHECK(spare.behind == std::vector<size_t>{2});
  CHECK(spare.step == 11);
}
