// The straggler check's parts that need no job: a node's window from its ranks' totals, the
// judgement across nodes (who holds the steps back, for how long), the step times file as the
// agent reads it, and the verdict in the metrics and in `ddprun status`.
#include <array>
#include <cstdint>
#include <string>

#include <fcntl.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include "exchanges/straggler.hpp"
#include "logs/agent_metrics.hpp"
#include "watchers/step_times_file.hpp"

using namespace ddprun::agent;
using straggler::Judge;
using straggler::NodeWindow;

namespace {

constexpr uint64_t kMs = 1'000'000;

// Node `rank`'s window `seq` of `steps` steps: each `step_ms` long, `wait_ms` of it waiting.
NodeWindow node(int rank, uint64_t seq, double step_ms, double wait_ms, int64_t steps = 3) {
  return NodeWindow{rank, seq, steps, step_ms / 1000, (step_ms - wait_ms) / 1000, wait_ms / 1000};
}

// Three nodes' windows `seq`: node 2 computes `slow_ms` where the others compute 60 ms.
std::vector<NodeWindow> three(uint64_t seq, double slow_ms, int64_t steps = 3) {
  const double step = std::max(60.0, slow_ms) + 10;  // 10 ms of all-reduce after the last one
  return {node(0, seq, step, step - 60, steps), node(1, seq, step, step - 60, steps),
          node(2, seq, step, step - slow_ms, steps)};
}

// As three(), every time ten times as long: steps of about a second, a large job's. A verdict
// also needs half a second of lag beyond the threshold, which steps of 0.1 s take long to add up.
std::vector<NodeWindow> long_steps(uint64_t seq, double slow_ms, int64_t steps = 3) {
  std::vector<NodeWindow> windows = three(seq, slow_ms, steps);
  for (NodeWindow& w : windows) {
    w.step_s *= 10;
    w.compute_s *= 10;
    w.wait_s *= 10;
  }
  return windows;
}

std::string temp_path() {
  char name[] = "/tmp/straggler-test-XXXXXX";
  const int fd = ::mkstemp(name);
  ::close(fd);
  return name;
}

}  // namespace

TEST_CASE("straggler: a node's window is its slowest rank's compute and wait per step",
          "[straggler]") {
  const std::map<int, StepTotals> before = {{0, {10, 1000 * kMs, 400 * kMs}},
                                            {1, {10, 1000 * kMs, 100 * kMs}}};
  // Five steps of 100 ms each: rank 0 waited 40 ms a step, rank 1 10 ms.
  const std::map<int, StepTotals> now = {{0, {15, 1500 * kMs, 600 * kMs}},
                                         {1, {15, 1500 * kMs, 150 * kMs}}};
  const std::optional<NodeWindow> w = straggler::window(before, now, 1);
  REQUIRE(w);
  CHECK(w->steps == 5);
  CHECK(w->step_s == Approx(0.1));
  CHECK(w->compute_s == Approx(0.09));
  CHECK(w->wait_s == Approx(0.01));
  // A rank that timed no step since: no window yet.
  const std::map<int, StepTotals> stalled = {{0, {15, 1500 * kMs, 600 * kMs}},
                                             {1, {10, 1000 * kMs, 100 * kMs}}};
  CHECK_FALSE(straggler::window(before, stalled, 1));
}

TEST_CASE("straggler: the node the others wait for is lagging, by how much it holds the step",
          "[straggler]") {
  // Node 2 computes 100 ms where the others compute 60: the step is 110 ms, 40 of them its lag.
  const std::optional<straggler::Lagging> l = straggler::lagging(three(1, 100), 0.2);
  REQUIRE(l);
  CHECK(l->node_rank == 2);
  CHECK(l->held_back == Approx(40.0 / 70));
  CHECK(l->compute_ratio == Approx(100.0 / 60));
  CHECK(l->wait_ratio == Approx(10.0 / 50));
  // Under the threshold: nothing.
  CHECK_FALSE(straggler::lagging(three(1, 66), 0.2));
}

TEST_CASE("straggler: a node that computes longer but waits as long as the others is not lagging",
          "[straggler]") {
  // Its longer compute is not what the others wait for (they wait as long as it does).
  const std::vector<NodeWindow> windows = {node(0, 1, 150, 90), node(1, 1, 150, 90),
                                           node(2, 1, 150, 90 - 1)};
  CHECK(straggler::lagging(windows, 0.2) == std::nullopt);
  std::vector<NodeWindow> busy = windows;
  busy[2] = NodeWindow{2, 1, 3, 0.150, 0.120, 0.095};  // more compute, yet the most wait
  CHECK_FALSE(straggler::lagging(busy, 0.2));
}

TEST_CASE("straggler: a verdict needs the steps in a row, in three sets of windows in a row",
          "[straggler]") {
  Judge judge(0.2, 5);
  CHECK_FALSE(judge.add(long_steps(1, 100, 6), 3).lagging);  // 6 steps, but one set: not yet
  CHECK_FALSE(judge.add(long_steps(2, 100, 2), 3).lagging);  // two sets: not yet
  const auto verdict = judge.add(long_steps(3, 100, 1), 3).lagging;
  REQUIRE(verdict);
  CHECK(verdict->node_rank == 2);
  CHECK(verdict->steps == 9);
  // Once per node.
  CHECK_FALSE(judge.add(long_steps(4, 100), 3).lagging);
  CHECK_FALSE(judge.add(long_steps(5, 100), 3).lagging);
}

TEST_CASE("straggler: a node just beyond the threshold must lag longer than one far beyond it",
          "[straggler]") {
  // Node 2 computes 845 ms against 600 (245 ms over 700: held back 35%, 15% beyond the threshold),
  // as a neighbour's bursts of CPU time held a healthy node on a loaded machine: after 5 steps in
  // 3 sets the verdict a node held back 57% gets (above) is not given; its lag beyond the
  // threshold adds up to two steps' time only after 14 steps.
  Judge judge(0.2, 5);
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    CHECK_FALSE(judge.add(long_steps(seq, 84.5), 3).lagging);  // 12 steps: 1.8 steps' lag
  }
  const auto verdict = judge.add(long_steps(5, 84.5), 3).lagging;
  REQUIRE(verdict);
  CHECK(verdict->node_rank == 2);
  CHECK(verdict->held_back == Approx(0.35));
  CHECK(verdict->steps == 15);
}

TEST_CASE("straggler: a one-off slow set of steps is no verdict", "[straggler]") {
  Judge judge(0.2, 5);
  for (uint64_t seq = 1; seq <= 40; ++seq) {
    // Every third set one node is slow (a data-loader pause, a collection, a neighbour's burst),
    // twice in a row now and then, never three times.
    CHECK_FALSE(judge.add(long_steps(seq, seq % 3 != 0 ? 150 : 60, 4), 3).lagging);
  }
}

TEST_CASE("straggler: where steps are short, a burst of seconds is no verdict, a throttled node is",
          "[straggler]") {
  // Steps of 40 ms, 8 to a set of windows: node 2 held back 35% by a neighbour's burst for 32
  // steps (1.3 s) adds up to 4.8 steps' lag beyond the threshold, but 0.2 s of it: no verdict.
  const auto fast = [](uint64_t seq, double slow_ms) {
    const double step = std::max(20.0, slow_ms) + 10;
    return std::vector<NodeWindow>{node(0, seq, step, step - 20, 8),
                                   node(1, seq, step, step - 20, 8),
                                   node(2, seq, step, step - slow_ms, 8)};
  };
  Judge judge(0.2, 5);
  for (uint64_t seq = 1; seq <= 4; ++seq) CHECK_FALSE(judge.add(fast(seq, 30.5), 3).lagging);
  CHECK_FALSE(judge.add(fast(5, 20), 3).lagging);  // the burst ends
  // Held back 150% (a CPU throttled to 40%): 0.78 s beyond the threshold in a set, named after
  // three sets.
  CHECK_FALSE(judge.add(fast(6, 65), 3).lagging);
  CHECK_FALSE(judge.add(fast(7, 65), 3).lagging);
  const auto verdict = judge.add(fast(8, 65), 3).lagging;
  REQUIRE(verdict);
  CHECK(verdict->node_rank == 2);
  CHECK(verdict->held_back == Approx(1.5));
  CHECK(verdict->steps == 24);
}

TEST_CASE("straggler: a set is judged only once every node has a newer window", "[straggler]") {
  Judge judge(0.2, 4);
  std::vector<NodeWindow> first = long_steps(1, 100);
  CHECK_FALSE(judge.add(first, 3).lagging);
  // Nodes 0 and 2 published again, node 1 did not: nothing is judged.
  std::vector<NodeWindow> partial = long_steps(2, 100);
  partial[1].seq = 1;
  CHECK_FALSE(judge.add(partial, 3).lagging);
  CHECK_FALSE(judge.add(long_steps(2, 100), 3).lagging);
  CHECK(judge.add(long_steps(3, 100), 3).lagging);
}

// Three nodes' windows `seq`, each computing 60 ms and then waiting `wait_ms` for the others.
std::vector<NodeWindow> waiting(uint64_t seq, double wait_ms, int64_t steps = 3) {
  return {node(0, seq, 60 + wait_ms, wait_ms, steps), node(1, seq, 60 + wait_ms, wait_ms, steps),
          node(2, seq, 60 + wait_ms, wait_ms, steps)};
}

TEST_CASE("straggler: the whole job slowed in its waits is a slowdown once, after its pace",
          "[straggler]") {
  Judge judge(0.2, 5);
  uint64_t seq = 0;
  // The pace: 70 ms a step, 10 of it waiting. As slow from the start: nothing to compare.
  for (size_t i = 0; i < straggler::Pace::kPaceSets; ++i) {
    CHECK_FALSE(judge.add(waiting(++seq, 10), 3).slowdown);
  }
  CHECK_FALSE(judge.add(waiting(++seq, 12), 3).slowdown);  // 3% slower: the pace
  // A link turns slow: every node waits 40 ms. Named after 5 steps and 3 sets in a row.
  CHECK_FALSE(judge.add(waiting(++seq, 40), 3).slowdown);
  CHECK_FALSE(judge.add(waiting(++seq, 40), 3).slowdown);
  const straggler::Judgement j = judge.add(waiting(++seq, 40), 3);
  CHECK_FALSE(j.lagging);  // no node computes longer
  REQUIRE(j.slowdown);
  CHECK(j.slowdown->held_back() == Approx(100.0 / 70 - 1));
  CHECK(j.slowdown->steps == 9);
  CHECK(j.slowdown->pace_wait_s == Approx(0.010));
  // Once; after rebase() the slow pace is the job's.
  CHECK_FALSE(judge.add(waiting(++seq, 40), 3).slowdown);
  judge.rebase();
  for (size_t i = 0; i < straggler::Pace::kPaceSets + 5; ++i) {
    CHECK_FALSE(judge.add(waiting(++seq, 40), 3).slowdown);
  }
}

TEST_CASE("straggler: a slow link that stretches the compute too is a slowdown", "[straggler]") {
  // As measured on nodes 0 and 1 while node 2 sent at 200 Mbit/s under DDP (the collectives
  // overlap the backward pass): 213 ms a step, 33 of them waiting, became 330, 80 waiting; the
  // compute grew more than the waits did.
  straggler::Pace pace(0.2, 5);
  const auto steps = [](uint64_t seq, double step_ms, double wait_ms) {
    return std::vector<NodeWindow>{node(0, seq, step_ms, wait_ms, 1),
                                   node(1, seq, step_ms, wait_ms, 1),
                                   node(2, seq, step_ms, wait_ms, 1)};
  };
  uint64_t seq = 0;
  for (size_t i = 0; i < straggler::Pace::kPaceSets; ++i) pace.add(steps(++seq, 213, 33), false);
  for (int i = 0; i < 4; ++i) CHECK_FALSE(pace.add(steps(++seq, 330, 80), false));
  const std::optional<straggler::Slowdown> s = pace.add(steps(++seq, 330, 80), false);
  REQUIRE(s);
  CHECK(s->steps == 5);
  CHECK(s->wait_s == Approx(0.080));
}

TEST_CASE(
    "straggler: slower compute everywhere, a lagging node or a one-off slow set is no "
    "slowdown",
    "[straggler]") {
  straggler::Pace pace(0.2, 5);
  const auto computing = [](uint64_t seq, double compute_ms) {
    return std::vector<NodeWindow>{node(0, seq, compute_ms + 10, 10),
                                   node(1, seq, compute_ms + 10, 10),
                                   node(2, seq, compute_ms + 10, 10)};
  };
  uint64_t seq = 0;
  for (size_t i = 0; i < straggler::Pace::kPaceSets; ++i) pace.add(computing(++seq, 60), false);
  // Every node computes longer (a bigger batch, a loaded machine): not the links.
  for (int i = 0; i < 10; ++i) CHECK_FALSE(pace.add(computing(++seq, 120), false));
  // The waits grew, but a node lagged meanwhile: the lagging verdict's, not a slowdown.
  for (int i = 0; i < 10; ++i) CHECK_FALSE(pace.add(waiting(++seq, 40), true));
  // Slow in every other set only.
  for (int i = 0; i < 20; ++i) CHECK_FALSE(pace.add(waiting(++seq, i % 2 == 0 ? 40 : 10), false));
}

TEST_CASE("straggler: a window that is not one is refused", "[straggler]") {
  CHECK_FALSE(NodeWindow::from_json("garbage"));
  CHECK_FALSE(NodeWindow::from_json(R"({"node_rank":-1,"seq":1,"steps":1,"step_s":1,)"
                                    R"("compute_s":1,"wait_s":0})"));
  CHECK_FALSE(NodeWindow::from_json(R"({"node_rank":1,"seq":1,"steps":0,"step_s":1,)"
                                    R"("compute_s":1,"wait_s":0})"));
  const NodeWindow w = node(3, 7, 100, 20);
  const std::optional<NodeWindow> back = NodeWindow::from_json(w.to_json().dump());
  REQUIRE(back);
  CHECK(back->node_rank == 3);
  CHECK(back->seq == 7);
  CHECK(back->compute_s == Approx(0.08));
}

TEST_CASE("straggler: the step times file reads only whole totals", "[straggler]") {
  const std::string path = temp_path();
  StepTimesFile file(path);
  const std::optional<StepTotals> zero = file.read();
  REQUIRE(zero);
  CHECK(zero->steps == 0);
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  std::array<uint64_t, 4> record = {2, 7, 700 * kMs, 100 * kMs};
  REQUIRE(::pwrite(fd, record.data(), sizeof record, 0) == sizeof record);
  const std::optional<StepTotals> t = file.read();
  REQUIRE(t);
  CHECK(t->steps == 7);
  CHECK(t->wait_ns == 100 * kMs);
  record[0] = 3;  // being written
  REQUIRE(::pwrite(fd, record.data(), sizeof record, 0) == sizeof record);
  CHECK_FALSE(file.read());
  record = {4, 7, 100 * kMs, 700 * kMs};  // a wait longer than the steps: not totals
  REQUIRE(::pwrite(fd, record.data(), sizeof record, 0) == sizeof record);
  CHECK_FALSE(file.read());
  ::close(fd);
}

TEST_CASE("straggler: a verdict is counted in the metrics with its node and figure",
          "[straggler]") {
  AgentMetrics metrics(3);
  const std::string before = metrics.render();
  CHECK(before.find("ddprun_straggler_verdicts_total 0") != std::string::npos);
  CHECK(before.find("ddprun_straggler_held_back") == std::string::npos);
  metrics.consume("straggler", {{"node", "host_1_2"}, {"held_back", 0.41}});
  const std::string after = metrics.render();
  CHECK(after.find("ddprun_straggler_verdicts_total 1") != std::string::npos);
  CHECK(after.find("ddprun_straggler_held_back{node=\"host_1_2\"} 0.41") != std::string::npos);
}
