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
    "progress clock: auto waits for the worker's rhythm then takes the slowest interval times the "
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
  c.progress(t += 3s);
  CHECK(c.timeout() == 15s);  // the slowest interval, times 5
  CHECK_FALSE(c.hung(t + 15s));
  CHECK(c.hung(t + 15s + 1ms));
}

TEST_CASE("progress clock: a burst of output at start-up does not end the start under auto",
          "[hang]") {
  const Clock::time_point t0{};
  ProgressClock c({HangPolicy::Mode::kAuto, 0s}, t0);
  auto t = t0 + 1s;
  // A banner and warnings: a hundred lines within a few milliseconds count as one.
  for (int i = 0; i < 100; ++i) c.progress(t += 10us);
  CHECK(c.timeout() == ProgressClock::kStartTimeout);
  // Then the process group and the model take a minute, silent.
  CHECK_FALSE(c.hung(t + 60s));
  c.progress(t += 60s);
  for (size_t i = 0; i < ProgressClock::kAutoWarmup; ++i) c.progress(t += 100ms);
  CHECK(c.timeout() >= 300s);  // the minute of start-up was the slowest interval
}

TEST_CASE("progress clock: every tenth step ten times slower is learned, not a hang", "[hang]") {
  const Clock::time_point t0{};
  ProgressClock c({HangPolicy::Mode::kAuto, 0s}, t0);
  auto t = t0;
  for (int step = 0; step < 200; ++step) {
    const auto took = step % 10 == 9 ? 30s : 3s;
    CHECK_FALSE(c.hung(t + took));
    c.progress(t += took);
  }
  CHECK(c.timeout() == 150s);
}

TEST_CASE("progress clock: a restarted attempt keeps what was learned but starts again", "[hang]") {
  const Clock::time_point t0{};
  ProgressClock first({HangPolicy::Mode::kAuto, 0s}, t0);
  auto t = t0;
  for (int i = 0; i < 30; ++i) first.progress(t += i == 15 ? 4s : 100ms);
  CHECK(first.timeout() == 20s);
  ProgressClock second({HangPolicy::Mode::kAuto, 0s}, t, first.slowest());
  // Until its workers show their rhythm again, the restart (a restore, the process group) has the
  // start's timeout, however quickly its first line came.
  second.progress(t += 10ms);
  CHECK_FALSE(second.hung(t + 60s));
  for (size_t i = 0; i < ProgressClock::kAutoWarmup; ++i) second.progress(t += 100ms);
  CHECK(second.timeout() == 20s);  // the slow step of the first attempt is not forgotten
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

TEST_CASE(
    "progress clock: a worker whose program ended has the start's timeout and teaches nothing",
    "[hang]") {
  const Clock::time_point t0{};
  ProgressClock c({HangPolicy::Mode::kFixed, 5s}, t0);
  c.progress(t0 + 1s);
  CHECK(c.hung(t0 + 7s));  // silent past the timeout while the program ran: hung
  c.ending(t0 + 4s);       // its exit handlers ran at 4 s: the interpreter's exit from there
  CHECK(c.is_ending());
  CHECK(c.timeout() == ProgressClock::kStartTimeout);
  CHECK(c.silent(t0 + 14s) == 10s);
  CHECK_FALSE(c.hung(t0 + 60s));
  CHECK(c.hung(t0 + 4s + ProgressClock::kStartTimeout + 1ms));
  c.ending(t0 + 100s);  // said again: the exit still began at 4 s
  CHECK(c.silent(t0 + 104s) == 100s);

  // Under auto, output during the exit is not an interval to learn.
  ProgressClock a({HangPolicy::Mode::kAuto, 0s}, t0);
  auto t = t0;
  for (size_t i = 0; i <= ProgressClock::kAutoWarmup; ++i) a.progress(t += 100ms);
  a.ending(t);
  a.progress(t + 60s);
  CHECK(a.slowest() == 100ms);
}
