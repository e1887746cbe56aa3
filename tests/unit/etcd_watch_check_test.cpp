#include <catch2/catch.hpp>

#include "etcd_watch_check.hpp"

using ddprun::rendezvous::etcd::WatchCheck;
using Next = WatchCheck::Next;
using namespace std::chrono_literals;

namespace {
const auto t0 = WatchCheck::Clock::time_point{} + 1h;
constexpr auto kHeartbeat = 2000ms;

// A member at revision 45 at two renewals while the watch stays at 40: the second asks for a range.
void two_renewals_behind(WatchCheck& check) {
  check.renewed(45, 40, t0);
  check.renewed(45, 40, t0 + 700ms);
}
}  // namespace

TEST_CASE("watch check: a watch that has what its member has is never ranged for",
          "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  for (int i = 0; i < 10; ++i)
    CHECK(check.renewed(40 + i, 40 + i, t0 + i * 700ms) == Next::kNothing);
}

TEST_CASE("watch check: a change on its way when the member answered is not looked into",
          "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  CHECK(check.renewed(41, 40, t0) == Next::kNothing);
  // By the next renewal the watch brought revision 41; the member has a newer one on its way.
  CHECK(check.renewed(42, 41, t0 + 700ms) == Next::kNothing);
  CHECK(check.renewed(42, 42, t0 + 1400ms) == Next::kNothing);
}

TEST_CASE("watch check: a watch still short of its member's revision a renewal later is ranged for",
          "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  CHECK(check.renewed(41, 40, t0) == Next::kNothing);
  CHECK(check.renewed(41, 40, t0 + 700ms) == Next::kRange);
}

TEST_CASE("watch check: a newer key the watch does not bring within a heartbeat moves it",
          "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  check.renewed(45, 40, t0);
  REQUIRE(check.renewed(45, 40, t0 + 700ms) == Next::kRange);
  check.found(/*newest=*/45, /*keys=*/7, /*as_of=*/45, /*seen=*/40, /*held=*/7, t0 + 710ms);
  REQUIRE(check.lag());
  CHECK(check.lag()->target == 45);
  CHECK(check.renewed(45, 40, t0 + 1400ms) == Next::kNothing);
  CHECK(check.renewed(45, 40, t0 + 2100ms) == Next::kNothing);
  CHECK(check.renewed(45, 40, t0 + 2800ms) == Next::kMove);
  check.reset();
  CHECK_FALSE(check.lag());
}

TEST_CASE("watch check: a lag the watch makes up in time moves nothing", "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  two_renewals_behind(check);
  check.found(45, 7, 45, 40, 7, t0 + 710ms);
  CHECK(check.renewed(46, 45, t0 + 1400ms) == Next::kNothing);
  CHECK_FALSE(check.lag());
  CHECK(check.renewed(46, 46, t0 + 5000ms) == Next::kNothing);
}

TEST_CASE("watch check: a deletion the watch does not bring is a lag past its own revision",
          "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  two_renewals_behind(check);
  // The newest key is one the watch brought; one key fewer than it holds: a deletion unseen.
  check.found(/*newest=*/38, /*keys=*/6, /*as_of=*/45, /*seen=*/40, /*held=*/7, t0 + 710ms);
  REQUIRE(check.lag());
  CHECK(check.lag()->target == 41);
  CHECK(check.renewed(45, 40, t0 + 2800ms) == Next::kMove);
}

TEST_CASE("watch check: changes the watch brought while the range was asked are in step",
          "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  two_renewals_behind(check);
  // At revision 46 a key was deleted; the watch brought it (seen 46) before the answer came, so
  // its count no longer matches the range's.
  check.found(/*newest=*/45, /*keys=*/7, /*as_of=*/45, /*seen=*/46, /*held=*/6, t0 + 710ms);
  CHECK_FALSE(check.lag());
}

TEST_CASE("watch check: other jobs' changes on a shared etcd back the ranges off to a minute",
          "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  auto now = t0;
  int64_t etcd = 100;  // the cluster's revision: other jobs write all the time
  int ranges = 0;
  for (int i = 0; i < 1000; ++i) {  // about 12 minutes of renewals
    now += 700ms;
    etcd += 3;
    if (check.renewed(etcd, 40, now) == Next::kRange) {
      ++ranges;
      check.found(/*newest=*/40, /*keys=*/7, /*as_of=*/etcd, /*seen=*/40, /*held=*/7, now);
      CHECK_FALSE(check.lag());
    }
  }
  CHECK(check.range_pause() == WatchCheck::kLongestRangePause);
  // 2, 4, 8, 16, 32 s, then a minute apart: about 17 ranges in 12 minutes, not 1000.
  CHECK(ranges >= 10);
  CHECK(ranges <= 20);
}

TEST_CASE("watch check: a range that failed is asked again after the pause, not at once",
          "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  check.renewed(45, 40, t0);
  REQUIRE(check.renewed(45, 40, t0 + 700ms) == Next::kRange);
  check.failed(t0 + 1000ms);
  CHECK(check.renewed(45, 40, t0 + 1400ms) == Next::kNothing);
  CHECK(check.renewed(45, 40, t0 + 2100ms) == Next::kNothing);
  CHECK(check.renewed(45, 40, t0 + 3100ms) == Next::kRange);
}

TEST_CASE("watch check: a watch that moved starts afresh", "[etcd_watch_check]") {
  WatchCheck check(kHeartbeat);
  two_renewals_behind(check);
  check.found(45, 7, 45, 40, 7, t0 + 710ms);
  check.reset();
  CHECK_FALSE(check.lag());
  // Its member's revision ahead again: one renewal's wait before a range, as at first.
  CHECK(check.renewed(47, 45, t0 + 1400ms) == Next::kNothing);
  CHECK(check.renewed(47, 45, t0 + 2100ms) == Next::kRange);
}
