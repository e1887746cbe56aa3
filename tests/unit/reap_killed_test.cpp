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
using ddprun::agent::reaped_in_background;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// A child that exits once `release` (the write end of its pipe) is closed: it stands for one that
// SIGKILL cannot end yet (uninterruptible sleep), for as long as the test holds it.
pid_t held_child(int& release) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[1]);
    char c;
    while (::read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(fds[0]);
  release = fds[1];
  return pid;
}

// Whether `pid` is gone: reaped (a zombie still answers kill 0).
bool reaped(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

TEST_CASE("reap killed: a child that dies at SIGKILL is reaped before the call returns",
          "[containment]") {
  int release = -1;
  const pid_t pid = held_child(release);
  REQUIRE(pid > 0);
  ::kill(pid, SIGKILL);
  reap_killed(pid);
  CHECK(reaped(pid));
  CHECK_FALSE(reaped_in_background(pid));
  ::close(release);
}

TEST_CASE(
    "reap killed: a child still alive when the wait ends does not hold the caller, and is reaped "
    "once it exits",
    "[containment]") {
  int release = -1;
  const pid_t pid = held_child(release);
  REQUIRE(pid > 0);
  const auto start = steady_clock::now();
  reap_killed(pid, steady_clock::now() + milliseconds(100));
  CHECK(steady_clock::now() - start < std::chrono::seconds(5));  // not until the child exits
  CHECK_FALSE(reaped(pid));
  CHECK(reaped_in_background(pid));
  reap_killed(pid);  // handed off already: returns at once, no second thread
  ::close(release);  // the child exits now
  const auto until = steady_clock::now() + std::chrono::seconds(10);
  while ((!reaped(pid) || reaped_in_background(pid)) && steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  CHECK(reaped(pid));  // not left a zombie
  CHECK_FALSE(reaped_in_background(pid));
}
