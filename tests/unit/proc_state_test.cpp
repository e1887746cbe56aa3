#include <catch2/catch.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "watchers/proc_state.hpp"

using namespace ddprun::agent;

// Lines recorded from /proc/<pid>/stat on Linux 6.x.
TEST_CASE("proc state: the letter after the command name however it is spelled", "[proc]") {
  // The parent of a vfork() whose child never execs: uninterruptible sleep.
  CHECK(proc_state_of("31159 (vf) D 31152 31152 10271 0 -1 4194304 114 0 0 0 0 0 0 0 20 0 1 0 "
                      "2415945 2400256 239 18446744073709551615 93919602200576") == 'D');
  // A command named "x) R (y": only the last ')' ends the name.
  CHECK(proc_state_of("31156 (x) R (y) S 31155 31152 10271 0 -1 4194304 146 0 0 0 0 0 0 0 20 0 1 "
                      "0 2415925 2990080 389") == 'S');
  CHECK(proc_state_of("7 (zombie) Z 1 7 7 0 -1") == 'Z');
  CHECK_FALSE(proc_state_of(""));
  CHECK_FALSE(proc_state_of("31156 no parentheses S"));
  CHECK_FALSE(proc_state_of("31156 (truncated)"));
  CHECK_FALSE(proc_state_of("31156 (x)S 1"));  // no space: not the kernel's format
}

TEST_CASE("proc state: this process runs and a gone one has none", "[proc]") {
  CHECK(read_proc_state(::getpid()) == 'R');
  CHECK_FALSE(read_proc_state(0x3fffffff));
  CHECK(read_wchan(0x3fffffff) == "?");
}

TEST_CASE("proc state: the time waiting for a CPU is the second schedstat field", "[proc]") {
  using namespace std::chrono_literals;
  CHECK(cpu_wait_of("2141837306 52893411 917\n") == 52893411ns);
  CHECK(cpu_wait_of("0 0 0") == 0ns);
  CHECK_FALSE(cpu_wait_of(""));
  CHECK_FALSE(cpu_wait_of("2141837306 52893411"));
  CHECK_FALSE(cpu_wait_of("2141837306 x 917"));
  CHECK_FALSE(cpu_wait_of("1 2 3 4"));
  CHECK_FALSE(read_cpu_wait(0x3fffffff));
}

TEST_CASE("proc state: two busy processes on one CPU each wait for it", "[proc]") {
  using namespace std::chrono_literals;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  pid_t busy[2];
  for (pid_t& pid : busy) {
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::sched_setaffinity(0, sizeof one, &one);
      for (;;) {
      }
    }
  }
  // Each runs about half the time: its wait grows as fast as the other runs (bounded: 5 s).
  bool both_waited = false;
  for (int i = 0; i < 100 && !both_waited; ++i) {
    std::this_thread::sleep_for(50ms);
    const auto a = read_cpu_wait(busy[0]), b = read_cpu_wait(busy[1]);
    REQUIRE(a);
    REQUIRE(b);
    both_waited = *a > 50ms && *b > 50ms;
  }
  for (pid_t pid : busy) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  CHECK(both_waited);
}
