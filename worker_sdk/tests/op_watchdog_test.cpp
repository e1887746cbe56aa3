#include <catch2/catch.hpp>

#include "ddp/errors.hpp"
#include "op_watchdog.hpp"

using namespace ddp;
using Clock = OpWatchdog::Clock;
using namespace std::chrono_literals;

TEST_CASE("watchdog: finished operations complete in launch order", "[watchdog]") {
  int aborts = 0;
  OpWatchdog w([] { return std::nullopt; }, [&] { ++aborts; });
  bool first_done = false, second_done = true;  // the second finishing first must not jump ahead
  const auto t0 = Clock::now();
  Work a = w.add("op a", t0 + 10s, [&] { return first_done; });
  Work b = w.add("op b", t0 + 10s, [&] { return second_done; });
  CHECK(w.poll(t0) == 2);
  CHECK_FALSE(a.completed());
  CHECK_FALSE(b.completed());
  first_done = true;
  CHECK(w.poll(t0) == 0);
  a.wait();
  b.wait();
  CHECK(aborts == 0);
}

TEST_CASE("watchdog: a passed deadline aborts once and fails every pending op", "[watchdog]") {
  int aborts = 0;
  OpWatchdog w([] { return std::nullopt; }, [&] { ++aborts; });
  const auto t0 = Clock::now();
  Work a = w.add("all_reduce of 8 float32", t0 + 1s, [] { return false; });
  Work b = w.add("barrier", t0 + 60s, [] { return false; });
  CHECK(w.poll(t0 + 500ms) == 2);
  CHECK(w.poll(t0 + 1s) == 0);
  CHECK(aborts == 1);
  CHECK(w.aborted());
  CHECK_THROWS_AS(a.wait(), TimeoutError);
  CHECK_THROWS_WITH(b.wait(), Catch::Contains("passed its deadline"));
  Work late = w.add("broadcast", t0 + 60s, [] { return true; });
  CHECK_THROWS_AS(late.wait(), CommError);
  w.poll(t0 + 2s);
  CHECK(aborts == 1);
}

TEST_CASE("watchdog: an asynchronous communicator error aborts and fails pending ops",
          "[watchdog]") {
  std::optional<std::string> error;
  int aborts = 0;
  OpWatchdog w([&] { return error; }, [&] { ++aborts; });
  const auto t0 = Clock::now();
  Work a = w.add("all_gather", t0 + 60s, [] { return false; });
  CHECK(w.poll(t0) == 1);
  error = "remote process exited or there was a network error";
  CHECK(w.poll(t0) == 0);
  CHECK(aborts == 1);
  CHECK_THROWS_WITH(a.wait(), Catch::Contains("remote process exited"));
}

TEST_CASE("watchdog: with nothing pending, errors and deadlines do not matter", "[watchdog]") {
  int aborts = 0;
  OpWatchdog w([] { return std::optional<std::string>("stale"); }, [&] { ++aborts; });
  CHECK(w.poll(Clock::now() + 1h) == 0);
  CHECK(aborts == 0);
}
