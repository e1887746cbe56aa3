#include <catch2/catch.hpp>

#include "watchers/worker_stacks.hpp"

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

// Recorded: faulthandler.dump_traceback(all_threads=True) called by ddprun.inprocess's thread
// (Python 3.14): what an in-process worker writes before it aborts after a hang; no header.
constexpr const char* kInProcess314 =
    R"(Current thread 0x00007fc2932046c0 [ddprun-inproces] (most recent call first):
  File "/tmp/fhd.py", line 4 in watch
  File "/usr/lib/python3.14/threading.py", line 1024 in run
  File "/usr/lib/python3.14/threading.py", line 1082 in _bootstrap_inner
  File "/usr/lib/python3.14/threading.py", line 1044 in _bootstrap

Thread 0x00007fc29364f200 [python3] (most recent call first):
  File "/tmp/fhd.py", line 6 in waiting_in_all_reduce
  File "/tmp/fhd.py", line 8 in <module>
)";

}  // namespace

TEST_CASE(
    "python stacks: an in-process worker's dump of every thread gives its main thread's "
    "frame",
    "[hang]") {
  const auto s = python_threads_stack(kInProcess314);
  REQUIRE(s);
  CHECK(s->innermost == "fhd.py:6 in waiting_in_all_reduce");
  CHECK(s->text == kInProcess314);
  CHECK_FALSE(python_threads_stack(""));
  CHECK_FALSE(python_threads_stack("nothing a dump would say\n"));
}

TEST_CASE("python stacks: the main thread's innermost frame of the last dump", "[hang]") {
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

TEST_CASE("python stacks: the main thread counts when another thread took the signal", "[hang]") {
  // Recorded shape: a logger thread (newest, listed first) handled SIGABRT.
  const auto s = last_python_stack(R"(Fatal Python error: Aborted

Current thread 0x00007f5d2d7fe6c0 (most recent call first):
  File "/t/hang_ddp.py", line 25 in chatter
  File "/usr/lib/python3.11/threading.py", line 975 in run

Thread 0x00007f5d3a1b1040 (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/autograd/__init__.py", line 200 in backward
  File "/t/hang_ddp.py", line 38 in main
)");
  REQUIRE(s);
  CHECK(s->innermost == "__init__.py:200 in backward");
}

TEST_CASE("python stacks: output without a dump has none", "[hang]") {
  CHECK_FALSE(last_python_stack(""));
  CHECK_FALSE(last_python_stack("step 1\nstep 2\n"));
  CHECK_FALSE(last_python_stack("Fatal Python error: Aborted\n\n<garbage>\n"));
}

TEST_CASE("hang culprit: the ranks away from where most are are named with their node", "[hang]") {
  const std::string wait = "distributed_c10d.py:2050 in all_reduce";
  std::map<int, std::string> frames;
  std::map<int, int> nodes;
  for (int r = 0; r < 8; ++r) {
    frames[r] = wait;
    nodes[r] = r / 2;
  }
  frames[5] = "data_loader.py:88 in load_batch";
  CHECK(hang_culprit(frames, nodes) ==
        "rank 5 on node 2 is in `load_batch` (data_loader.py:88); the 7 others are in "
        "`all_reduce` (distributed_c10d.py:2050)");
  frames[6] = "no stack (the worker wrote none)";
  CHECK(hang_culprit(frames, {}) ==
        "rank 5 is in `load_batch` (data_loader.py:88), rank 6 is in no stack (the worker wrote "
        "none); the 6 others are in `all_reduce` (distributed_c10d.py:2050)");
}

TEST_CASE("hang culprit: all in one place, no majority, one rank", "[hang]") {
  const std::map<int, std::string> same = {{0, "a.py:1 in f"}, {1, "a.py:1 in f"}};
  CHECK(hang_culprit(same, {}) == "all 2 ranks are in the same place: `f` (a.py:1)");
  const std::map<int, std::string> split = {{0, "x"}, {1, "y"}, {2, "x"}, {3, "y"}};
  CHECK(hang_culprit(split, {}) == "no place holds most of the 4 ranks: no rank stands out");
  CHECK(hang_culprit({{0, "x"}}, {}).empty());
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

namespace {
// gdb 13's `thread apply all bt` on heartbeat_probe sleeping in main (recorded on this machine),
// with a second thread added.
constexpr std::string_view kGdbDump =
    "[Thread debugging using libthread_db enabled]\n"
    "__GI___clock_nanosleep (clock_id=clock_id@entry=0, flags=flags@entry=0, req=0x7ffe1b6053b0, "
    "rem=0x7ffe1b6053b0) at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:71\n"
    "\n"
    "Thread 2 (Thread 0x7f04c9a29640 (LWP 8751) \"loader\"):\n"
    "#0  0x00007f04c9b2d9ef in poll () from /lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x000055d329957100 in read_batches (fd=3) at /src/loader.cpp:88\n"
    "\n"
    "Thread 1 (Thread 0x7f04c9e2a000 (LWP 8750) \"heartbeat_probe\"):\n"
    "#0  __GI___clock_nanosleep (clock_id=clock_id@entry=0, flags=flags@entry=0, "
    "req=0x7ffe1b6053b0, rem=0x7ffe1b6053b0) at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:71\n"
    "#1  0x00007f04c9af1e53 in __GI___nanosleep (req=<optimized out>, rem=<optimized out>) at "
    "../sysdeps/unix/sysv/linux/nanosleep.c:25\n"
    "#2  0x000055d3299572de in std::this_thread::sleep_for<long, std::ratio<3600l, 1l> > "
    "(__rtime=...) at /usr/include/c++/12/bits/this_thread_sleep.h:80\n"
    "#3  main (argc=4, argv=0x7ffe1b605518) at /work/main/tests/launcher/heartbeat_probe.cpp:37\n"
    "[Inferior 1 (process 8750) detached]\n";
}  // namespace

TEST_CASE("worker stacks: gdb's main thread innermost frame in the program's own code", "[hang]") {
  const auto stack = ddprun::agent::gdb_stack(kGdbDump, 8750);
  REQUIRE(stack);
  CHECK(stack->innermost == "heartbeat_probe.cpp:37 in main");
  CHECK(stack->text == kGdbDump);
}

TEST_CASE("worker stacks: without the program's source the innermost sourced or any frame",
          "[hang]") {
  const auto sourced = ddprun::agent::gdb_stack(
      "Thread 1 (Thread 0x7f (LWP 5) \"w\"):\n"
      "#0  0x00007f04 in poll () from /lib/x86_64-linux-gnu/libc.so.6\n"
      "#1  0x00007f05 in wait_any (n=2) at /usr/include/x/wait.h:12\n",
      5);
  REQUIRE(sourced);
  CHECK(sourced->innermost == "wait.h:12 in wait_any");
  const auto bare = ddprun::agent::gdb_stack(
      "Thread 1 (process 9 \"w\"):\n#0  0x00007f04 in poll () from /lib/libc.so.6\n", 9);
  REQUIRE(bare);
  CHECK(bare->innermost == "poll");
}

TEST_CASE("worker stacks: gdb output without frames is no stack", "[hang]") {
  CHECK_FALSE(ddprun::agent::gdb_stack(
      "ptrace: Operation not permitted.\n/proc/42/ns/mnt: No such file or directory.\n", 42));
  CHECK_FALSE(ddprun::agent::gdb_stack("", 42));
  // gdb cut off by its time limit mid-line: the frame number alone is skipped, not thrown on.
  const auto cut = ddprun::agent::gdb_stack(
      "Thread 1 (process 9 \"w\"):\n#0  0x00007f04 in poll () from /lib/libc.so.6\n#1", 9);
  REQUIRE(cut);
  CHECK(cut->innermost == "poll");
}
