#include "exchanges/straggler.hpp"

#include <algorithm>
#include <exception>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace ddprun::agent::straggler {
namespace {

constexpr const char* kWindowTopic = "step_times";
constexpr const char* kLinkProbeTopic = "link_probe";
// A node lags in this many sets of windows in a row at least (about 0.75 s) before it is named:
// the CPU time another process takes from one node now and then (a neighbour, a collection) moves
// from node to node between sets; a slow node stays.
constexpr int kSetsInARow = 3;
// And its lag beyond the threshold adds up to this many steps' time over its run (the sum over
// its sets of steps x (held_back - threshold)): a node that holds the job far back is named after
// the steps in a row, one that holds it back just beyond the threshold must do so for longer. A
// neighbour's bursts of CPU time, which the scheduler can keep on one node's core for seconds,
// hold a node back a little (35% against a threshold of 20%, for 5 steps of 0.30 s, seen in a
// full run of the suite on 2 cores); a throttled node far more (63-150%).
constexpr double kLagInSteps = 2.0;
// And to this many seconds: such bursts last seconds, whatever the step's time, and where steps
// are short two steps' time is not much of it (a job of 30 ms steps would name a node held back
// 35% by a neighbour for 0.75 s). A node held back 35% is named after 3.3 s; one held back 63%
// by a throttled CPU after 1.2 s, and 150% after 0.4 s (the steps' rule then decides).
constexpr double kLagSeconds = 0.5;
// A job-wide slowdown is its communication's when the waits grew by at least this share of the
// step's growth. Not "more than the compute grew": where the collectives overlap the backward
// pass (DDP), a slow link stretches what a rank counts as its compute as well. Nodes 0 and 1 of a
// job whose node 2 sent at 200 Mbit/s saw their steps grow 0.10-0.15 s, their waits 31-59% of
// that and their compute the rest; a node compute-bound alone lags, which is judged on its own.
constexpr double kWaitShareOfSlowdown = 0.25;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 != 0 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

}  // namespace

nlohmann::json NodeWindow::to_json() const {
  return {{"node_rank", node_rank}, {"seq", seq},      {"steps", steps}, {"step_s", step_s},
          {"compute_s", compute_s}, {"wait_s", wait_s}};
}

std::optional<NodeWindow> NodeWindow::from_json(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    NodeWindow w;
    w.node_rank = j.at("node_rank").get<int>();
    w.seq = j.at("seq").get<uint64_t>();
    w.steps = j.at("steps").get<int64_t>();
    w.step_s = j.at("step_s").get<double>();
    w.compute_s = j.at("compute_s").get<double>();
    w.wait_s = j.at("wait_s").get<double>();
    if (w.node_rank < 0 || w.steps < 1 || !(w.step_s > 0) || !(w.compute_s >= 0) ||
        !(w.wait_s >= 0)) {
      return std::nullopt;
    }
    return w;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<NodeWindow> window(const std::map<int, StepTotals>& before,
                                 const std::map<int, StepTotals>& now, int64_t min_steps) {
  if (now.empty()) return std::nullopt;
  NodeWindow w;
  w.steps = -1;
  double step_sum = 0;
  for (const auto& [rank, t] : now) {
    const auto was = before.find(rank);
    const StepTotals b = was == before.end() ? StepTotals{} : was->second;
    if (t.steps < b.steps + static_cast<uint64_t>(std::max<int64_t>(min_steps, 1))) {
      return std::nullopt;
    }
    const auto steps = static_cast<double>(t.steps - b.steps);
    const double step = static_cast<double>(t.step_ns - b.step_ns) / steps / 1e9;
    const double wait = static_cast<double>(t.wait_ns - b.wait_ns) / steps / 1e9;
    const double compute = std::max(0.0, step - wait);
    if (w.steps < 0 || compute > w.compute_s) {
      w.compute_s = compute;
      w.wait_s = wait;
    }
    const auto counted = static_cast<int64_t>(t.steps - b.steps);
    w.steps = w.steps < 0 ? counted : std::min(w.steps, counted);
    step_sum += step;
  }
  w.step_s = step_sum / static_cast<double>(now.size());
  if (!(w.step_s > 0)) return std::nullopt;
  return w;
}

std::optional<Lagging> lagging(const std::vector<NodeWindow>& windows, double threshold) {
  if (windows.size() < 2) return std::nullopt;
  std::optional<Lagging> worst;
  for (const NodeWindow& w : windows) {
    std::vector<double> compute;
    std::vector<double> wait;
    for (const NodeWindow& o : windows) {
      if (o.node_rank == w.node_rank) continue;
      compute.push_back(o.compute_s);
      wait.push_back(o.wait_s);
    }
    const double others_compute = median(compute);
    const double others_wait = median(wait);
    const double excess = w.compute_s - others_compute;
    if (!(excess > 0) || !(w.step_s > excess) || !(w.wait_s < others_wait)) continue;
    const double held_back = excess / (w.step_s - excess);
    if (held_back <= threshold || (worst && worst->held_back >= held_back)) continue;
    worst = Lagging{w.node_rank,
                    held_back,
                    others_compute > 0 ? w.compute_s / others_compute : 0.0,
                    others_wait > 0 ? w.wait_s / others_wait : 0.0,
                    w.step_s,
                    w.steps};
  }
  return worst;
}

std::optional<Slowdown> Pace::add(const std::vector<NodeWindow>& set, bool a_node_lagged) {
  std::vector<double> steps;
  std::vector<double> waits;
  int64_t counted = set.empty() ? 0 : set.front().steps;
  for (const NodeWindow& w : set) {
    steps.push_back(w.step_s);
    waits.push_back(w.wait_s);
    counted = std::min(counted, w.steps);
  }
  const double step = median(steps);
  const double wait = median(waits);
  if (steps_s_.size() < kPaceSets) {
    steps_s_.push_back(step);
    waits_s_.push_back(wait);
    return std::nullopt;
  }
  const double pace = median(steps_s_);
  const double pace_wait = median(waits_s_);
  const bool slow = !a_node_lagged && step > pace * (1 + threshold_) &&
                    wait - pace_wait > kWaitShareOfSlowdown * (step - pace);
  if (!slow) {
    slow_steps_ = 0;
    slow_sets_ = 0;
    return std::nullopt;
  }
  slow_steps_ += counted;
  ++slow_sets_;
  if (said_ || slow_steps_ < steps_ || slow_sets_ < kSetsInARow) return std::nullopt;
  said_ = true;
  return Slowdown{step, pace, wait, pace_wait, slow_steps_};
}

void Pace::rebase() {
  steps_s_.clear();
  waits_s_.clear();
  slow_steps_ = 0;
  slow_sets_ = 0;
  said_ = false;
}

Judgement Judge::add(const std::vector<NodeWindow>& windows, int nodes) {
  for (const NodeWindow& w : windows) {
    if (w.node_rank >= nodes) continue;
    auto& kept = latest_[w.node_rank];
    if (w.seq > kept.seq) kept = w;
  }
  std::vector<NodeWindow> set;
  for (int n = 0; n < nodes; ++n) {
    const auto it = latest_.find(n);
    if (it == latest_.end() || it->second.seq <= judged_[n]) return {};
    set.push_back(it->second);
  }
  int64_t steps = set.front().steps;
  for (const NodeWindow& w : set) {
    judged_[w.node_rank] = w.seq;
    steps = std::min(steps, w.steps);
  }
  const std::optional<Lagging> l = lagging(set, threshold_);
  if (spdlog::should_log(spdlog::level::debug)) {
    std::string figures;
    for (const NodeWindow& w : set) {
      figures += fmt::format(" [node {}: {} steps of {:.3f} s, compute {:.3f} s, wait {:.3f} s]",
                             w.node_rank, w.steps, w.step_s, w.compute_s, w.wait_s);
    }
    spdlog::debug(
        "straggler check: a set of windows{}: {}", figures,
        l ? fmt::format("node {} lags, {:.0f}% held back", l->node_rank, l->held_back * 100)
          : std::string("no node lags"));
  }
  Judgement out;
  out.slowdown = pace_.add(set, l.has_value());
  if (!l) {
    suspect_.reset();
    return out;
  }
  if (suspect_ != l->node_rank) {
    suspect_ = l->node_rank;
    suspect_steps_ = 0;
    suspect_sets_ = 0;
    suspect_lag_ = 0;
    suspect_lag_s_ = 0;
  }
  suspect_steps_ += steps;
  ++suspect_sets_;
  suspect_lag_ += static_cast<double>(steps) * (l->held_back - threshold_);
  suspect_lag_s_ += static_cast<double>(steps) * l->step_s * (l->held_back - threshold_);
  if (suspect_steps_ < steps_ || suspect_sets_ < kSetsInARow) return out;
  if (std::find(named_.begin(), named_.end(), l->node_rank) != named_.end()) return out;
  if (suspect_lag_ < kLagInSteps || suspect_lag_s_ < kLagSeconds) {
    spdlog::debug(
        "straggler check: a suspect, node {}, lagged {} steps in a row (held back {:.0f}% now): "
        "{:.2f} of the {} steps' and {:.2f} of the {} s' lag beyond the threshold a verdict needs",
        l->node_rank, suspect_steps_, l->held_back * 100, suspect_lag_, kLagInSteps, suspect_lag_s_,
        kLagSeconds);
    return out;
  }
  named_.push_back(l->node_rank);
  out.lagging = *l;
  out.lagging->steps = suspect_steps_;
  return out;
}

std::string describe(const Lagging& l, const std::string& host) {
  return fmt::format(
      "node {} ({}) holds every step back by {:.0f}%: its ranks compute {:.2f}x the others' "
      "median and wait {:.2f}x theirs ({:.3f} s a step, {} steps in a row)",
      l.node_rank, host, l.held_back * 100, l.compute_ratio, l.wait_ratio, l.step_s, l.steps);
}

std::string describe_link(const Slowdown& s, int node_rank, const std::string& host,
                          double link_ratio, const std::string& measured) {
  return fmt::format(
      "node {} ({}) holds every step back by {:.0f}%: its link is {} than the round's median "
      "({}); the job's steps take {:.2f}x their pace, in the waits ({:.3f} s a step, {} steps in "
      "a row)",
      node_rank, host, s.held_back() * 100,
      link_ratio > 0 ? fmt::format("{:.2f}x slower", link_ratio) : std::string("far slower"),
      measured, s.step_s / s.pace_s, s.step_s, s.steps);
}

boost::asio::awaitable<void> publish(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                     rendezvous::Round r, NodeWindow mine) {
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = kWindowTopic;
  std::string text = mine.to_json().dump();
  try {
    co_await rdzv->publish(std::move(scope), std::move(topic), std::move(text));
  } catch (const std::exception& e) {
    spdlog::debug("straggler check: this node's steps not shared: {}", e.what());
  }
}

boost::asio::awaitable<std::vector<NodeWindow>> latest(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r) {
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = kWindowTopic;
  const std::vector<std::string> values = co_await rdzv->gather(
      std::move(scope), std::move(topic), r.num_nodes, std::chrono::milliseconds(0));
  std::vector<NodeWindow> windows;
  for (const std::string& v : values) {
    if (std::optional<NodeWindow> w = NodeWindow::from_json(v)) windows.push_back(*w);
  }
  co_return windows;
}

boost::asio::awaitable<void> ask_for_links(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                           rendezvous::Round r, int first_pass) {
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = kLinkProbeTopic;
  std::string text = std::to_string(first_pass);
  try {
    co_await rdzv->publish(std::move(scope), std::move(topic), std::move(text));
  } catch (const std::exception& e) {
    spdlog::warn("straggler check: could not ask the nodes to measure their links: {}", e.what());
  }
}

boost::asio::awaitable<std::optional<int>> links_asked(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r) {
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = kLinkProbeTopic;
  const std::vector<std::string> values =
      co_await rdzv->gather(std::move(scope), std::move(topic), 1, std::chrono::milliseconds(0));
  std::optional<int> asked;
  for (const std::string& v : values) {  // node rank 0's only (others never publish it)
    try {
      asked = std::max(asked.value_or(0), std::stoi(v));
    } catch (const std::exception&) {
      spdlog::debug("straggler check: a malformed link probe request: {}", v);
    }
  }
  co_return asked;
}

std::optional<int> replaced(const rendezvous::Rendezvous& rdzv, const rendezvous::Round& r) {
  const std::optional<rendezvous::Flag> flag = rdzv.raised(rendezvous::Scope::of(r), kReplaceFlag);
  if (!flag) return std::nullopt;
  try {
    return std::stoi(flag->detail);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ddprun::agent::straggler
