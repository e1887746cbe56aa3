// One attempt of the worker group with real processes: what interrupt() does before and during it.
#include <unistd.h>

#include <chrono>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <catch2/catch.hpp>

#include "containment.hpp"
#include "worker_group.hpp"

using namespace ddprun::agent;
using namespace std::chrono_literals;

namespace {

std::vector<WorkerLaunch> sleepers(int n) {
  std::vector<WorkerLaunch> out(n);
  for (int i = 0; i < n; ++i) {
    out[i].id.local_rank = out[i].id.rank = i;
    out[i].spawn.argv = {"/bin/sleep", "30"};
  }
  return out;
}

GroupResult run(boost::asio::io_context& io, WorkerGroup& group, std::vector<WorkerLaunch> l) {
  std::optional<GroupResult> result;
  boost::asio::co_spawn(io, group.run(std::move(l)), [&](std::exception_ptr e, GroupResult r) {
    if (e) std::rethrow_exception(e);
    result = std::move(r);
  });
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!result && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
  REQUIRE(result);
  return *result;
}

}  // namespace

TEST_CASE("worker group: an interruption before the workers start is kept, and none starts",
          "[agent]") {
  boost::asio::io_context io;
  Containment containment(io, false);
  WorkerGroup group(io, 5s, containment);
  group.interrupt();  // the round ended before run(): the watcher fired first
  const auto started = std::chrono::steady_clock::now();
  const GroupResult r = run(io, group, sleepers(2));
  CHECK(r.state == GroupResult::State::kInterrupted);
  CHECK(r.failures.empty());
  CHECK(std::chrono::steady_clock::now() - started < 1s);  // nothing was started and stopped
  CHECK_FALSE(group.active());
  // Kept for that one run only: the next attempt runs (and is interrupted while it runs).
  boost::asio::steady_timer later(io, 200ms);
  later.async_wait([&](boost::system::error_code) { group.interrupt(); });
  const GroupResult next = run(io, group, sleepers(1));
  CHECK(next.state == GroupResult::State::kInterrupted);
  CHECK(std::chrono::steady_clock::now() - started >= 200ms);
}

TEST_CASE(
    "worker process: a stop signal that comes before its exec never runs the agent's handlers",
    "[agent]") {
  boost::asio::io_context io;
  bool agent_signalled = false;
  boost::asio::signal_set agent_signals(io, SIGTERM);
  agent_signals.async_wait([&](boost::system::error_code ec, int) {
    if (!ec) agent_signalled = true;
  });
  // Each worker is stopped at once, often before its exec: the window the child must keep shut.
  for (int i = 0; i < 300 && !agent_signalled; ++i) {
    SpawnSpec spec;
    spec.argv = {"/bin/true"};
    WorkerProcess w(io, spec);
    w.signal_group(SIGTERM);
    bool exited = false;
    w.watch_exit([&](const ExitStatus&) { exited = true; });
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!exited && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
    REQUIRE(exited);
  }
  io.poll();
  CHECK_FALSE(agent_signalled);
}
