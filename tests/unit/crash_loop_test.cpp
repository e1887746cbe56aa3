// Crash loops: what makes two failed attempts the same, and when enough of them are.
#include <catch2/catch.hpp>

#include "exchanges/crash_loop.hpp"

using namespace ddprun::agent;

namespace {

WorkerFailure failure(int rank, int exitcode, int seconds) {
  WorkerFailure f;
  f.rank = rank;
  f.exitcode = exitcode;
  f.time = std::chrono::system_clock::time_point(std::chrono::seconds(seconds));
  return f;
}

}  // namespace

TEST_CASE("crash loop: an attempt's signature is its earliest failure and its step", "[restart]") {
  WorkerFailure raised = failure(3, 1, 10);
  raised.error =
      ErrorRecord{"ValueError: bad batch shape",
                  "Traceback (most recent call last):\n  File \"t.py\", line 4, in main\n"
                  "    f()\n  File \"t.py\", line 9, in load_batch\n    raise X",
                  {},
                  {}};
  const std::vector<WorkerFailure> both = {failure(0, -15, 11), raised};
  CHECK(crash_loop::signature(both, 40) ==
        "rank 3: exit 1, ValueError: bad batch shape at File \"t.py\", line 9, in load_batch; "
        "resumed from step 40");
  CHECK(crash_loop::signature({failure(2, -9, 5)}, std::nullopt) ==
        "rank 2: signal 9; resumed from nothing");
  CHECK(crash_loop::signature({}, 3).empty());
}

TEST_CASE("crash loop: the last N signatures the same, none empty", "[restart]") {
  CHECK(crash_loop::repeats({"b", "a", "a", "a"}, 3));
  CHECK_FALSE(crash_loop::repeats({"a", "a", "b"}, 3));
  CHECK_FALSE(crash_loop::repeats({"a", "a"}, 3));
  CHECK_FALSE(crash_loop::repeats({"", "", ""}, 3));
  CHECK_FALSE(crash_loop::repeats({"a", "a", "a"}, 0));
  CHECK(crash_loop::repeats({"a", "a"}, 2));
}
