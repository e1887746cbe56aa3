// Reaping a child sent SIGKILL (node/reap_killed.hpp): the caller is held for a bounded time, and
// a child that outlives it is still reaped, in the background.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "node/reap_killed.hpp"

using ddprun::agent::reap_killed;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// A child that exits after `ms` milliseconds (one that SIGKILL cannot end at once stands for one
// in uninterruptible sleep).
pid_t child_exiting_after(int ms) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::usleep(static_cast<useconds_t>(ms) * 1000);
    ::_exit(0);
  }
  return pid;
}

// Whether `pid` is gone: reaped (a zombie still answers kill 0).
bool reaped(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

TEST_CASE("reap killed: a child that dies at SIGKILL is reaped before the call returns",
          "[containment]") {
  const pid_t pid = child_exiting_after(60'000);
  REQUIRE(pid > 0);
  ::kill(pid, SIGKILL);
  reap_killed(pid);
  CHECK(reaped(pid));
}

TEST_CASE(
    "reap killed: a child still alive when the wait ends does not hold the caller, and is reaped "
    "once it exits",
    "[containment]") {
  const pid_t pid = child_exiting_after(700);
  REQUIRE(pid > 0);
  const auto start = steady_clock::now();
  reap_killed(pid, milliseconds(100));  // (not killed: it stands for one SIGKILL cannot end yet)
  CHECK(steady_clock::now() - start < milliseconds(600));
  CHECK_FALSE(reaped(pid));
  const auto until = steady_clock::now() + std::chrono::seconds(10);
  while (!reaped(pid) && steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  CHECK(reaped(pid));  // not left a zombie
}
