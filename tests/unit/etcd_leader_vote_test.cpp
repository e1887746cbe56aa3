#include <catch2/catch.hpp>

#include "etcd_leader_vote.hpp"

using ddprun::rendezvous::etcd::leadership_settled;
using ddprun::rendezvous::etcd::majority_without_live_leader;
using ddprun::rendezvous::etcd::MemberAnswer;
using Kind = MemberAnswer::Kind;

namespace {
MemberAnswer follows(std::string member, std::string leader) {
  return MemberAnswer{Kind::kAnswered, std::move(member), std::move(leader)};
}
MemberAnswer refused(std::string member = "") {
  return MemberAnswer{Kind::kRefused, std::move(member), ""};
}
const MemberAnswer kSilent{};
}  // namespace

TEST_CASE("etcd leader vote: a cluster whose members follow a live leader has one",
          "[etcd_leader_vote]") {
  CHECK_FALSE(
      majority_without_live_leader({follows("a", "a"), follows("b", "a"), follows("c", "a")}, 3));
  CHECK_FALSE(
      majority_without_live_leader({follows("a", "a"), follows("b", "a"), refused("c")}, 3));
}

TEST_CASE("etcd leader vote: members without a leader make a majority without one",
          "[etcd_leader_vote]") {
  CHECK(majority_without_live_leader({follows("a", ""), follows("b", ""), kSilent}, 3));
  CHECK_FALSE(majority_without_live_leader({follows("a", ""), kSilent, kSilent}, 3));
}

TEST_CASE("etcd leader vote: a leader that refuses connections is no live leader",
          "[etcd_leader_vote]") {
  // The leader killed; its followers have not noticed yet.
  CHECK(majority_without_live_leader({refused("a"), follows("b", "a"), follows("c", "a")}, 3));
  CHECK(majority_without_live_leader({refused("a"), follows("b", "a"), kSilent}, 3));
  // Whose ID is not known, it counts for itself only.
  CHECK_FALSE(majority_without_live_leader({refused(), follows("b", "a"), kSilent}, 3));
}

TEST_CASE("etcd leader vote: silent members never count, this node may be the one cut off",
          "[etcd_leader_vote]") {
  CHECK_FALSE(majority_without_live_leader({kSilent, kSilent, kSilent}, 3));
  CHECK_FALSE(majority_without_live_leader({kSilent, kSilent, follows("c", "")}, 3));
}

TEST_CASE("etcd leader vote: a majority is of the whole cluster not of the endpoints asked",
          "[etcd_leader_vote]") {
  CHECK(majority_without_live_leader({follows("a", "")}, 1));
  CHECK_FALSE(majority_without_live_leader({follows("a", "")}, 3));
  CHECK_FALSE(majority_without_live_leader({follows("a", ""), follows("b", "")}, 5));
  CHECK(majority_without_live_leader({follows("a", ""), follows("b", ""), refused("c")}, 5));
}

TEST_CASE("etcd leader vote: the verdict settles as soon as the rest cannot change it",
          "[etcd_leader_vote]") {
  // Two answer that a live member (one of them) leads: the third cannot tip it.
  CHECK(
      leadership_settled({follows("a", "a"), follows("b", "a"), kSilent}, {true, true, false}, 3));
  // Two lack a leader: settled the other way.
  CHECK(leadership_settled({follows("a", ""), refused("b"), kSilent}, {true, true, false}, 3));
  // One names a leader that has not answered: it may yet refuse.
  CHECK_FALSE(leadership_settled({follows("b", "a"), kSilent, kSilent}, {true, false, false}, 3));
  CHECK_FALSE(leadership_settled({follows("a", "a"), kSilent, kSilent}, {true, false, false}, 3));
  // A member asked that stayed silent has arrived: it counts for nothing either way.
  CHECK(leadership_settled({follows("a", "a"), kSilent, kSilent}, {true, true, true}, 3));
}

TEST_CASE("etcd leader vote: members outside the endpoints keep the verdict open",
          "[etcd_leader_vote]") {
  CHECK_FALSE(leadership_settled({follows("a", "a")}, {true}, 3));
  CHECK(leadership_settled({follows("a", "a"), follows("b", "a")}, {true, true}, 3));
}
