#include <catch2/catch.hpp>

#include "ddprun/agent/python_stacks.hpp"

using namespace ddprun::agent;

namespace {

// Recorded: faulthandler (PYTHONFAULTHANDLER=1) on SIGABRT, Python 3.11, after other output.
constexpr const char* kPython311 = R"(rank 1 step 9 loss 0.210
Fatal Python error: Aborted

Thread 0x00007fb6710656c0 (most recent call first):
  File "/tmp/fh.py", line 4 in <lambda>
  File "/usr/lib/python3.11/threading.py", line 982 in run
  File "/usr/lib/python3.11/threading.py", line 1045 in _bootstrap_inner

Current thread 0x00007fb672049b80 (most recent call first):
  File "/tmp/fh.py", line 3 in stuck_in_data_loading
  File "/tmp/fh.py", line 5 in <module>
)";

// Recorded: Python 3.14 names threads and adds the C stack.
constexpr const char* kPython314 = R"(Fatal Python error: Aborted

Thread 0x00007f10101766c0 [Thread-1 (<lamb] (most recent call first):
  File "/tmp/fh.py", line 4 in <lambda>

Current thread 0x00007f10106f2200 [python3] (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/autograd/graph.py", line 829 in _engine_run_backward
  File "/tmp/train.py", line 20 in main

Current thread's C stack trace (most recent call first):
  Binary file "python3", at _Py_DumpStack+0x4a [0x499c1d]
)";

}  // namespace

TEST_CASE("python stacks: the current thread's innermost frame of the last dump", "[hang]") {
  auto s = last_python_stack(kPython311);
  REQUIRE(s);
  CHECK(s->innermost == "fh.py:3 in stuck_in_data_loading");
  CHECK(s->text.starts_with("Fatal Python error: Aborted"));
  s = last_python_stack(kPython314);
  REQUIRE(s);
  CHECK(s->innermost == "graph.py:829 in _engine_run_backward");
  // Two dumps (an earlier attempt's in the same log): the last one counts.
  s = last_python_stack(std::string(kPython314) + kPython311);
  REQUIRE(s);
  CHECK(s->innermost == "fh.py:3 in stuck_in_data_loading");
}

TEST_CASE("python stacks: output without a dump has none", "[hang]") {
  CHECK_FALSE(last_python_stack(""));
  CHECK_FALSE(last_python_stack("step 1\nstep 2\n"));
  CHECK_FALSE(last_python_stack("Fatal Python error: Aborted\n\n<garbage>\n"));
}

TEST_CASE("python stacks: ranks grouped by frame with ranges folded", "[hang]") {
  CHECK(ranks_by_frame({{0, "b"}, {1, "a"}, {2, "b"}, {3, "b"}, {4, "b"}, {6, "b"}}) ==
        "ranks 0, 2-4, 6: b; rank 1: a");
  CHECK(ranks_by_frame({{5, "x"}}) == "rank 5: x");
  CHECK(ranks_by_frame({}).empty());
}

TEST_CASE("python stacks: frames shared between nodes read back as they were", "[hang]") {
  const std::map<int, std::string> frames = {{0, "graph.py:829 in backward"},
                                             {7, "train.py:14 in stuck_in_data_loading"}};
  CHECK(ddprun::agent::frames_from_text(ddprun::agent::frames_to_text(frames)) == frames);
  CHECK(ddprun::agent::frames_to_text({{3, "a\nb"}}) == "3\ta b\n");
}

TEST_CASE("python stacks: shared frames that are not rank and frame lines are skipped", "[hang]") {
  const auto frames =
      ddprun::agent::frames_from_text("garbage\n\tno rank\n-1\tneg\nx2\tbad\n2\tok\n5\tlast");
  CHECK(frames == std::map<int, std::string>{{2, "ok"}, {5, "last"}});
}
