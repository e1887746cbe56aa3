// The guardian (node/guardian.hpp) once the agent is gone: every process that began with the
// workers' mark in its environment is SIGKILLed, wherever the entry lies in that environment, and
// a process whose environment merely resembles it is not.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "node/guardian.hpp"

using ddprun::agent::Guardian;

namespace {

// A `sleep 60` whose whole environment is `env`, once it has exec'd (before that, its environment
// is still this test's).
pid_t sleeper(const std::vector<std::string>& env) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> envp;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    char sleep[] = "sleep", sixty[] = "60";
    char* argv[] = {sleep, sixty, nullptr};
    ::execve("/bin/sleep", argv, envp.data());
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  const std::string want(
      "sleep\0"
      "60\0",
      9);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline");
    if (std::string(std::istreambuf_iterator<char>(cmdline), {}) == want) return pid;
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Whether `pid`, a child of this test, was ended by SIGKILL within `wait` (polled: the guardian
// moves on once the process's memory is gone, before the process is a zombie); one still running
// is ended here.
bool killed(pid_t pid, std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
  const auto until = std::chrono::steady_clock::now() + wait;
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFSIGNALED(status);
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return false;
}

// An agent that starts its guardian, gives it `mark` and dies as a SIGKILL leaves it (no
// destructor, so no word that it ended as it should); returns once its guardian has exited too
// (this test is a child subreaper: the orphaned guardian is its child).
void agent_killed_with(const std::string& mark) {
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t agent = ::fork();
  if (agent == 0) {
    std::unique_ptr<Guardian> guardian = Guardian::start("");
    if (guardian == nullptr || !guardian->mark(mark)) ::_exit(1);
    const pid_t pid = guardian->pid();
    if (::write(fds[1], &pid, sizeof pid) != sizeof pid) ::_exit(1);
    ::_exit(0);
  }
  REQUIRE(agent > 0);
  ::close(fds[1]);
  pid_t guardian = 0;
  REQUIRE(::read(fds[0], &guardian, sizeof guardian) == sizeof guardian);
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(agent, &status, 0) == agent);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(::waitpid(guardian, &status, 0) == guardian);  // (bounded: its own alarm ends it)
  CHECK(WIFEXITED(status));
}

}  // namespace

TEST_CASE(
    "guardian: once the agent is gone, it kills every process begun with the workers' mark in its "
    "environment, the entry anywhere in it, and none whose environment only resembles it",
    "[containment]") {
  std::random_device random;
  const std::string name = "DDPRUN_CONTAINED_TEST_" + std::to_string(random());
  const std::string mark = name + "=4242";
  // The guardian reads an environment 64 KiB at a time, after the NUL it counts before the first
  // entry: a filler of `n` bytes puts the mark's entry at byte n + 1 of the file.
  const auto filler = [](size_t n) { return "F=" + std::string(n - 2, 'x'); };
  const std::vector<pid_t> marked = {
      sleeper({mark}),
      sleeper({"HOME=/", mark, "PATH=/bin"}),
      sleeper({filler(65530 - 6), mark}),  // across the first piece's end
      sleeper({filler(65535 - 1), mark}),  // the NUL before it the first piece's last byte
      sleeper({filler(65535), mark}),      // in the second piece, at its start
      sleeper({filler(100000), filler(100000), mark}),  // pieces further on
  };
  const std::vector<pid_t> unmarked = {
      sleeper({mark + "0"}),  // a longer value
      sleeper({"X" + mark}),  // a longer name
      sleeper({name + "=424"}),
      sleeper({"A=" + mark}),  // in another entry's value
      sleeper({}),
  };
  agent_killed_with(mark);
  for (size_t i = 0; i < marked.size(); ++i) {
    INFO("marked process " << i);
    CHECK(killed(marked[i], std::chrono::milliseconds(5000)));
  }
  for (size_t i = 0; i < unmarked.size(); ++i) {
    INFO("unmarked process " << i);
    CHECK_FALSE(killed(unmarked[i]));
  }
}

TEST_CASE(
    "guardian: an agent that ends as it should cleaned up itself: its guardian searches for no "
    "mark",
    "[containment]") {
  const std::string mark = "DDPRUN_CONTAINED_TEST_" + std::to_string(std::random_device()()) + "=1";
  const pid_t marked = sleeper({mark});
  {
    std::unique_ptr<Guardian> guardian = Guardian::start("");
    REQUIRE(guardian != nullptr);
    REQUIRE(guardian->mark(mark));
  }  // (its destructor says so, and waits for the guardian to exit)
  CHECK_FALSE(killed(marked));
}

TEST_CASE("guardian: a mark too long for its record is refused, not cut short", "[containment]") {
  std::unique_ptr<Guardian> guardian = Guardian::start("");
  REQUIRE(guardian != nullptr);
  CHECK_FALSE(guardian->mark("DDPRUN_CONTAINED_X=" + std::string(300, 'y')));
  CHECK(guardian->mark("DDPRUN_CONTAINED_X=1"));
}
