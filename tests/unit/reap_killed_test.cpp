// Reaping a child sent SIGKILL (node/reap_killed.hpp): the caller is held for a bounded time, and
// a child that outlives it is still reaped, in the background.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
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

namespace {

// The child a process below hands off, and its release: for that process's exit handler.
pid_t g_handed_off = -1;
int g_release = -1;

// Runs after the static destructors of what was first used after it was registered: releases the
// handed-off child and waits until the background thread has reaped it and said so.
void release_after_static_destructors() {
  ::close(g_release);
  const auto until = steady_clock::now() + std::chrono::seconds(10);
  while (reaped_in_background(g_handed_off) && steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  if (reaped_in_background(g_handed_off)) ::_exit(3);
}

}  // namespace

TEST_CASE("reap killed: a child handed off still reaped after the process's static destructors ran",
          "[containment]") {
  // The agent ends right after such a hand-off (the warm interpreter slow to die at the job's
  // end); the background thread then reaps it while, or after, the exit handlers run. In the
  // sanitizer build a use of what they destroyed is reported and fails the run (status non-zero).
  // (It tells such a use apart where this case runs in a process of its own, as CTest runs each:
  // in one with the cases above, the state was first used, its destructor registered, before.)
  const pid_t agent = ::fork();
  REQUIRE(agent >= 0);
  if (agent == 0) {
    g_handed_off = held_child(g_release);
    std::atexit(release_after_static_destructors);  // before reap_killed's first use of its state
    reap_killed(g_handed_off, steady_clock::now());
    std::exit(0);  // not _exit: the exit handlers are the test
  }
  int status = 0;
  while (::waitpid(agent, &status, 0) < 0 && errno == EINTR) {
  }
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
