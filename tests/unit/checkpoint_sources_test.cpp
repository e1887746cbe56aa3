// Which in-memory checkpoint a round restores, and from where (exchanges/checkpoint_sources.hpp):
// the plan every node computes from what every node published.
#include <catch2/catch.hpp>

#include "exchanges/checkpoint_sources.hpp"

using namespace ddprun::agent::checkpoint_sources;

namespace {

NodeCheckpoints node(std::string id, std::vector<std::vector<int64_t>> local,
                     std::map<std::string, std::vector<std::vector<int64_t>>> holds = {}) {
  NodeCheckpoints n;
  n.id = std::move(id);
  n.local = std::move(local);
  n.holds = std::move(holds);
  n.host = "10.0.0.1";
  n.port = 4000;
  return n;
}

}  // namespace

TEST_CASE("checkpoint sources: what a node publishes reads back, and anything else is refused",
          "[checkpoint_sources]") {
  const NodeCheckpoints n = node("a", {{4, 5}, {5}}, {{"c", {{3, 4}, {4}}}});
  const std::optional<NodeCheckpoints> back = from_text(to_text(n));
  REQUIRE(back);
  CHECK(back->id == "a");
  CHECK(back->local == n.local);
  CHECK(back->holds == n.holds);
  CHECK(back->port == 4000);
  for (const char* bad : {"", "[]", "{\"id\":1}", "{\"id\":\"a\",\"local\":[[\"x\"]],\"holds\":{}}",
                          "{\"id\":\"a\",\"local\":[],\"holds\":[],\"host\":\"h\",\"port\":1}"}) {
    CHECK_FALSE(from_text(bad));
  }
}

TEST_CASE("checkpoint sources: every node's own regions, with no copies anywhere, as before",
          "[checkpoint_sources]") {
  const RestorePlan p = plan_restore({node("a", {{4, 5}, {5, 6}}), node("b", {{5, 6}, {5, 6}})});
  CHECK(p.step == 5);
  CHECK(p.fetches == std::vector<std::vector<Fetch>>(2));
  // A fresh job: nothing anywhere, every rank without a copy.
  const RestorePlan none = plan_restore({node("a", {{}, {}}), node("b", {{}})});
  CHECK_FALSE(none.step);
  CHECK(none.ranks_without_copy == std::vector<int>{0, 1, 2});
}

TEST_CASE("checkpoint sources: a node that joined in place of a lost one takes its copies",
          "[checkpoint_sources]") {
  // a held c's copies, b held a's; c was lost (b's are on... c): d joins with nothing.
  const RestorePlan p =
      plan_restore({node("a", {{6, 7}, {6, 7}}, {{"c", {{6, 7}, {6, 7}}}}),
                    node("b", {{6, 7}, {6, 7}}, {{"a", {{6, 7}, {6, 7}}}}), node("d", {{}, {}})});
  REQUIRE(p.step == 7);
  CHECK(p.adopted == std::vector<std::string>{"", "", "c"});
  REQUIRE(p.fetches[2].size() == 2);
  CHECK(p.fetches[2][0].holder == 0);
  CHECK(p.fetches[2][0].origin == "c");
  CHECK(p.fetches[2][1].origin_local == 1);
  CHECK(p.fetches[0].empty());
  CHECK(p.fetches[1].empty());
}

TEST_CASE("checkpoint sources: a node whose region lost the step gets its own copy back",
          "[checkpoint_sources]") {
  // The copies lag: b's regions hold 8 and 9, its peer a holds 6 and 7 of it; a's own regions
  // hold 7 and 8; d (in place of c, whose copies b holds at 7) has nothing. Step 7 is the newest
  // every rank can have: b fetches its own copy of it from a.
  const RestorePlan p = plan_restore({node("a", {{7, 8}}, {{"b", {{6, 7}}}}),
                                      node("b", {{8, 9}}, {{"c", {{7}}}}), node("d", {{}})});
  REQUIRE(p.step == 7);
  REQUIRE(p.fetches[1].size() == 1);
  CHECK(p.fetches[1][0].holder == 0);
  CHECK(p.fetches[1][0].origin == "b");
  REQUIRE(p.fetches[2].size() == 1);
  CHECK(p.fetches[2][0].holder == 1);
  CHECK(p.fetches[2][0].origin == "c");
}

TEST_CASE("checkpoint sources: copies lost with both their nodes leave no step, naming the ranks",
          "[checkpoint_sources]") {
  // a and b were lost; c held b's copies, and a's were on b. d takes b's place; e has nothing.
  const RestorePlan p =
      plan_restore({node("c", {{5}}, {{"b", {{5}}}}), node("d", {{}}), node("e", {{}})});
  CHECK_FALSE(p.step);
  CHECK(p.adopted == std::vector<std::string>{"", "b", ""});
  CHECK(p.ranks_without_copy == std::vector<int>{2});
}

TEST_CASE("checkpoint sources: the survivors alone restore their own, whatever copies linger",
          "[checkpoint_sources]") {
  const RestorePlan p =
      plan_restore({node("a", {{4, 5}}, {{"c", {{4, 5}}}}), node("b", {{4, 5}}, {{"a", {{5}}}})});
  CHECK(p.step == 5);
  CHECK(p.adopted == std::vector<std::string>{"", ""});
  CHECK(p.fetches == std::vector<std::vector<Fetch>>(2));
}
