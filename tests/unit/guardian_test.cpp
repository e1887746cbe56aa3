// The guardian (node/guardian.hpp) once the agent is gone: every process that began with the
// workers' mark in its environment is SIGKILLed, wherever the entry lies in that environment, and
// a process whose environment merely resembles it is not.
#include <signal.h>
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

// Whether `pid`, a child of this test, was ended by SIGKILL; one still running is ended here.
bool killed(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid) return WIFSIGNALED(status);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return false;
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
  {
    std::unique_ptr<Guardian> guardian = Guardian::start("");
    REQUIRE(guardian != nullptr);
    REQUIRE(guardian->mark(mark));
    // (Its destructor is the agent gone: the pipe closes, and it waits for the guardian to exit.)
  }
  for (size_t i = 0; i < marked.size(); ++i) {
    INFO("marked process " << i);
    CHECK(killed(marked[i]));
  }
  for (size_t i = 0; i < unmarked.size(); ++i) {
    INFO("unmarked process " << i);
    CHECK_FALSE(killed(unmarked[i]));
  }
}

TEST_CASE("guardian: a mark too long for its record is refused, not cut short", "[containment]") {
  std::unique_ptr<Guardian> guardian = Guardian::start("");
  REQUIRE(guardian != nullptr);
  CHECK_FALSE(guardian->mark("DDPRUN_CONTAINED_X=" + std::string(300, 'y')));
  CHECK(guardian->mark("DDPRUN_CONTAINED_X=1"));
}
