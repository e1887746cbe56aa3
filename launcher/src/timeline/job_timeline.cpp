#include "timeline/job_timeline.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

namespace ddprun::launcher::timeline {
namespace {

using nlohmann::json;

int int_field(const json& j, const char* name, int otherwise = -1) {
  auto it = j.find(name);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : otherwise;
}

// Whether a worker_exited line is a failure of the worker (not a stop ddprun made).
bool failed(const json& j) {
  if (j.value("stopped_by_ddprun", false)) return false;
  return j.contains("signal") || int_field(j, "exitcode", 0) != 0;
}

std::string exit_of(const json& j) {
  if (j.contains("signal") && j["signal"].is_string()) return j["signal"].get<std::string>();
  return fmt::format("exit {}", int_field(j, "exitcode", 0));
}

// One node's events, in its own order, turned into spans and marks.
class NodeBuilder {
 public:
  explicit NodeBuilder(NodeTimeline& node) : n_(node) {}

  void add(const LogEvent& e, int64_t t) {
    last_ = t;
    const json& j = e.fields;
    if (e.event == "round_formed") {
      close_round(t);
      round_ = Open{
          t, fmt::format("round {} (world {})", int_field(j, "round"), int_field(j, "world_size")),
          j};
      if (rank_ < 0) rank_ = int_field(j, "node_rank");
      if (restart_) phase("rendezvous", "the next round forming", restart_->stopped, t);
      if (restart_) restart_->formed = t;
    } else if (e.event == "workers_started") {
      started(j, t);
    } else if (e.event == "worker_exited") {
      exited(e, t);
    } else if (e.event == "job_end") {
      mark(kAgentTrack, e, t);
      finish(t);
    } else {
      if (e.event == "hang" && attempt_) {
        attempt_->hung = true;
        attempt_->first_failure = std::min(attempt_->first_failure.value_or(t), t);
      }
      const int rank = int_field(j, "local_rank");
      mark(rank >= 0 ? rank : kAgentTrack, e, t);
    }
  }

  // Closes what is still open at the node's last event: an attempt under way is "unfinished".
  void finish(int64_t t) {
    if (attempt_) {
      for (auto& [rank, w] : attempt_->workers) span(rank, w.name, "worker", w.start, t, w.details);
      span(kAgentTrack, attempt_->name, "unfinished", attempt_->start, t, attempt_->details);
      attempt_.reset();
    }
    close_round(t);
    restart_.reset();
  }
  int64_t last() const { return last_; }
  int first_rank() const { return rank_; }

 private:
  struct Open {
    int64_t start = 0;
    std::string name;
    json details;
  };
  struct Attempt {
    int64_t start = 0;
    std::string name;
    json details;
    std::map<int, Open> workers;  // those still running
    bool failed = false, hung = false, stopped = false;
    std::optional<int64_t> first_failure, first_exit;
  };
  struct Restart {  // after a failed attempt: when its workers had all stopped, the round formed
    int64_t stopped = 0;
    std::optional<int64_t> formed;
  };

  void span(int track, std::string name, std::string kind, int64_t from, int64_t to, json details) {
    n_.spans.push_back(Span{track, std::move(name), std::move(kind), from, std::max(from, to),
                            std::move(details)});
  }
  void phase(const char* kind, const char* what, int64_t from, int64_t to) {
    span(kRestartTrack, std::string("restart: ") + what, kind, from, to, json::object());
  }
  void mark(int track, const LogEvent& e, int64_t t) {
    n_.marks.push_back(Mark{track, e.event, t, e.fields});
  }
  void close_round(int64_t t) {
    if (round_) span(kAgentTrack, round_->name, "round", round_->start, t, round_->details);
    round_.reset();
  }

  void started(const json& j, int64_t t) {
    if (attempt_) finish_attempt(t);
    if (restart_ && restart_->formed)
      phase("starting", "starting the workers", *restart_->formed, t);
    restart_.reset();
    Attempt a;
    a.start = t;
    a.details = j;
    const int restart = round_ ? int_field(round_->details, "restart_count", 0) : 0;
    a.name = fmt::format("attempt {}", restart);
    if (j.contains("workers") && j["workers"].is_array()) {
      for (const json& w : j["workers"]) {
        const int rank = int_field(w, "local_rank");
        if (rank < 0) continue;
        n_.local_ranks = std::max(n_.local_ranks, rank + 1);
        a.workers[rank] =
            Open{t, fmt::format("rank {} (pid {})", int_field(w, "rank"), int_field(w, "pid")), w};
      }
    }
    attempt_ = std::move(a);
  }

  void exited(const LogEvent& e, int64_t t) {
    const json& j = e.fields;
    const int rank = int_field(j, "local_rank");
    if (!attempt_) {
      mark(rank >= 0 ? rank : kAgentTrack, e, t);
      return;
    }
    Attempt& a = *attempt_;
    a.first_exit = std::min(a.first_exit.value_or(t), t);
    if (auto it = a.workers.find(rank); it != a.workers.end()) {
      json details = it->second.details;
      details["exit"] = exit_of(j);
      span(rank, it->second.name, "worker", it->second.start, t, std::move(details));
      a.workers.erase(it);
    }
    if (failed(j)) {
      a.failed = true;
      a.first_failure = std::min(a.first_failure.value_or(t), t);
      mark(rank, e, t);
    }
    if (j.value("stopped_by_ddprun", false)) a.stopped = true;
    if (a.workers.empty()) finish_attempt(t);
  }

  void finish_attempt(int64_t t) {
    Attempt& a = *attempt_;
    const char* kind = a.hung              ? "hung"
                       : a.failed          ? "failed"
                       : a.stopped         ? "stopped"
                       : a.workers.empty() ? "succeeded"
                                           : "unfinished";
    for (auto& [rank, w] : a.workers) span(rank, w.name, "worker", w.start, t, w.details);
    json details = a.details;
    details["ended"] = kind;
    span(kAgentTrack, a.name, kind, a.start, t, std::move(details));
    if (std::string(kind) != "succeeded") {
      const int64_t from = a.first_failure.value_or(a.first_exit.value_or(t));
      phase("stopping", "stopping the workers", from, t);
      restart_ = Restart{t, std::nullopt};
    }
    attempt_.reset();
  }

  NodeTimeline& n_;
  std::optional<Open> round_;
  std::optional<Attempt> attempt_;
  std::optional<Restart> restart_;
  int64_t last_ = 0;
  int rank_ = -1;
};

}  // namespace

JobTimeline build_timeline(const EventLogs& logs) {
  JobTimeline job;
  job.run_id = logs.run_id;
  // Each agent's events (by host and agent pid; a log without pids: by host and file).
  std::map<std::string, std::vector<const LogEvent*>> per_agent;
  std::vector<std::string> order;
  for (const LogEvent& e : logs.events) {
    const std::string key = e.agent != 0 ? fmt::format("{}\n{}", e.node, e.agent)
                                         : fmt::format("{}\n{}", e.node, e.file);
    if (!per_agent.contains(key)) order.push_back(key);
    per_agent[key].push_back(&e);
  }
  std::vector<std::pair<int, NodeTimeline>> built;
  std::map<std::string, int> hosts;
  for (const std::string& key : order) {
    std::vector<const LogEvent*>& events = per_agent[key];
    std::stable_sort(events.begin(), events.end(),
                     [](const LogEvent* a, const LogEvent* b) { return a->time_us < b->time_us; });
    NodeTimeline node;
    node.host = events.front()->node;
    node.agent = events.front()->agent;
    ++hosts[node.host];
    for (const LogEvent* e : events) {  // the quickest round trip's offset
      const json& j = e->fields;
      if (e->event != "round_formed" || !j.contains("clock_offset_ms")) continue;
      const double rtt = j.value("clock_round_trip_ms", 0.0);
      if (!node.round_trip_ms || rtt < *node.round_trip_ms) {
        node.round_trip_ms = rtt;
        node.clock_offset_ms = j.value("clock_offset_ms", 0.0);
      }
    }
    const auto shift = static_cast<int64_t>(node.clock_offset_ms.value_or(0.0) * 1000.0);
    NodeBuilder b(node);
    for (const LogEvent* e : events) b.add(*e, e->time_us + shift);
    b.finish(b.last());
    built.emplace_back(b.first_rank(), std::move(node));
  }
  std::stable_sort(built.begin(), built.end(), [](const auto& a, const auto& b) {
    return (a.first < 0 ? std::numeric_limits<int>::max() : a.first) <
           (b.first < 0 ? std::numeric_limits<int>::max() : b.first);
  });
  job.start_us = std::numeric_limits<int64_t>::max();
  job.end_us = std::numeric_limits<int64_t>::min();
  for (auto& [rank, node] : built) {
    node.label = rank >= 0 ? fmt::format("node {} · {}", rank, node.host) : node.host;
    if (hosts[node.host] > 1) node.label += fmt::format(" (agent {})", node.agent);
    for (const Span& s : node.spans) {
      job.start_us = std::min(job.start_us, s.start_us);
      job.end_us = std::max(job.end_us, s.end_us);
    }
    for (const Mark& m : node.marks) {
      job.start_us = std::min(job.start_us, m.time_us);
      job.end_us = std::max(job.end_us, m.time_us);
    }
    job.nodes.push_back(std::move(node));
  }
  if (job.nodes.empty()) job.start_us = job.end_us = 0;
  return job;
}

}  // namespace ddprun::launcher::timeline
