#include <catch2/catch.hpp>

#include "ddprun/agent/progress_clock.hpp"

using namespace ddprun::agent;
using namespace std::chrono_literals;
using Clock = ProgressClock::Clock;

TEST_CASE("progress clock: a fixed timeout counts from the last progress", "[hang]") {
  const Clock::time_point t0{};
  ProgressClock c({HangPolicy::Mode::kFixed, 5s}, t0);
  // Starting (no progress yet) has a timeout of its own.
  CHECK(c.timeout() == ProgressClock::kStartTimeout);
  CHECK_FALSE(c.hung(t0 + 60s));
  CHECK(c.hung(t0 + ProgressClock::kStartTimeout + 1ms));
  c.progress(t0);
  CHECK_FALSE(c.hung(t0 + 5s));
  CHECK(c.hung(t0 + 5s + 1ms));
  c.progress(t0 + 4s);
  CHECK_FALSE(c.hung(t0 + 9s));
  CHECK(c.silent(t0 + 9s) == 5s);
  CHECK(c.timeout() == 5s);
}

TEST_CASE(
    "progress clock: auto waits for its warm-up then takes the longest interval times the "
    "factor with a floor",
    "[hang]") {
  const Clock::time_point t0{};
  ProgressClock c({HangPolicy::Mode::kAuto, 0s}, t0);
  CHECK(c.timeout() == ProgressClock::kStartTimeout);
  c.progress(t0 + 30s);  // the start (imports) is not an interval
  auto t = t0 + 30s;
  for (size_t i = 0; i < ProgressClock::kAutoWarmup - 1; ++i) c.progress(t += 100ms);
  CHECK(c.timeout() == ProgressClock::kStartTimeout);
  c.progress(t += 100ms);
  CHECK(c.timeout() == ProgressClock::kAutoFloor);  // 5 x 100 ms is under the floor
  c.progress(t += 1s);
  CHECK(c.timeout() == 5s);  // the longest interval, times 5
  CHECK_FALSE(c.hung(t + 5s));
  CHECK(c.hung(t + 5s + 1ms));
}

TEST_CASE("progress clock: time spent waiting for a CPU is not silence", "[hang]") {
  const Clock::time_point t0{};
  ProgressClock c({HangPolicy::Mode::kFixed, 5s}, t0);
  c.cpu_wait(40s);  // the first reading: what came before is not counted either way
  c.progress(t0 + 1s);
  CHECK(c.silent(t0 + 4s) == 3s);
  c.cpu_wait(42s);  // 2 s of the next 6 s runnable but not running
  CHECK(c.waited_for_cpu() == 2s);
  CHECK(c.silent(t0 + 7s) == 4s);
  CHECK_FALSE(c.hung(t0 + 8s));
  CHECK(c.hung(t0 + 8s + 1ms));
  c.cpu_wait(41s);  // a counter that went back (a reading of another process) is not a gain
  CHECK(c.waited_for_cpu() == 2s);
  c.progress(t0 + 9s);  // progress starts the count again
  CHECK(c.waited_for_cpu() == 0s);
  CHECK(c.silent(t0 + 10s) == 1s);
}
