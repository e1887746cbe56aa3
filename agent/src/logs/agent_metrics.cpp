#include "logs/agent_metrics.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ddprun/store/metrics_server.hpp"

namespace ddprun::agent {

using store::prometheus_sample;

namespace {
// The phases of a restart in the order they happen, then their sum.
constexpr const char* kRestartPhases[] = {"detection", "stopping",       "rendezvous",
                                          "starting",  "first_progress", "total"};
}  // namespace

void AgentMetrics::consume(const std::string& event, const nlohmann::json& f) {
  if (event == "round_formed") {
    round_ = f.value("round", 0);
    restart_count_ = f.value("restart_count", 0);
    node_rank_ = f.value("node_rank", 0);
    num_nodes_ = f.value("num_nodes", 0);
    world_size_ = f.value("world_size", 0);
    ++rounds_formed_;
  } else if (event == "workers_started") {
    workers_.clear();
    for (const auto& w : f.value("workers", nlohmann::json::array())) {
      workers_[w.value("local_rank", 0)] = Worker{w.value("rank", 0), "running"};
    }
  } else if (event == "worker_exited") {
    const bool stopped = f.value("stopped_by_ddprun", false);
    const bool ok = f.value("exitcode", -1) == 0;
    const std::string state = ok ? "succeeded" : stopped ? "stopped" : "failed";
    workers_[f.value("local_rank", 0)].state = state;
    ++exits_[state];
  } else if (event == "node_joined") {
    ++nodes_seen_;
  } else if (event == "node_left") {
    --nodes_seen_;
  } else if (event == "job_end") {
    ended_ = true;
  } else if (event == "checkpoint_persisted") {
    ++persisted_;
    persisted_step_ = std::max(persisted_step_, f.value("step", int64_t{-1}));
    persist_seconds_ = f.value("seconds", 0.0);
  } else if (event == "node_check") {
    ++node_checks_;
    node_check_seconds_ = f.value("seconds", 0.0);
    node_check_slow_.clear();
    for (const auto& s : f.value("slow", nlohmann::json::array())) {
      node_check_slow_.push_back(
          {s.value("node", std::string()), s.value("probe", std::string()), s.value("ratio", 0.0)});
    }
  } else if (event == "straggler") {
    ++stragglers_;
    straggler_node_ = f.value("node", std::string());
    straggler_held_back_ = f.value("held_back", 0.0);
  } else if (event == "restart_phases") {
    for (const char* phase : kRestartPhases) {
      const auto it = f.find(std::string(phase) + "_s");
      if (it != f.end() && it->is_number()) restart_phases_[phase].observe(it->get<double>());
    }
  } else if (event == "checkpoint_persist_failed" || event == "checkpoint_persist_dropped") {
    ++persist_misses_[event == "checkpoint_persist_failed" ? "failed" : "dropped"];
  }
}

// The round and the job: where this node stands, the restarts used.
std::string AgentMetrics::render_round() const {
  std::string out;
  out += prometheus_sample("ddprun_round", "gauge", "The rendezvous round running (-1: none yet).",
                           round_);
  out += prometheus_sample("ddprun_rounds_formed_total", "counter",
                           "Rounds this agent took part in.", rounds_formed_);
  out += prometheus_sample("ddprun_world_size", "gauge", "Workers in the round, every node.",
                           world_size_);
  out += prometheus_sample("ddprun_num_nodes", "gauge", "Nodes in the round.", num_nodes_);
  out +=
      prometheus_sample("ddprun_node_rank", "gauge", "This node's rank in the round.", node_rank_);
  out += prometheus_sample("ddprun_nodes_present", "gauge",
                           "Nodes this agent sees in the job, spares included.", nodes_seen_);
  out += prometheus_sample("ddprun_restarts", "gauge", "Restarts of the job used so far.",
                           restart_count_);
  out +=
      prometheus_sample("ddprun_max_restarts", "gauge", "Restarts the job may use.", max_restarts_);
  out += prometheus_sample("ddprun_job_ended", "gauge", "1 once this agent's job has ended.",
                           ended_ ? 1 : 0);
  return out;
}

// This node's workers: by state, each one, their exits.
std::string AgentMetrics::render_workers() const {
  std::string out;
  std::map<std::string, int> by_state = {
      {"running", 0}, {"succeeded", 0}, {"failed", 0}, {"stopped", 0}};
  for (const auto& [local, w] : workers_) ++by_state[w.state];
  bool first = true;
  for (const auto& [state, n] : by_state) {
    out += prometheus_sample("ddprun_workers", "gauge",
                             first ? "This node's workers of the current round, by state." : "", n,
                             fmt::format("state=\"{}\"", state));
    first = false;
  }
  first = true;
  for (const auto& [local, w] : workers_) {
    out += prometheus_sample("ddprun_worker_running", "gauge",
                             first ? "1 while the worker runs." : "", w.state == "running" ? 1 : 0,
                             fmt::format("local_rank=\"{}\",rank=\"{}\"", local, w.rank));
    first = false;
  }
  first = true;
  for (const char* state : {"succeeded", "failed", "stopped"}) {
    const auto it = exits_.find(state);
    out +=
        prometheus_sample("ddprun_worker_exits_total", "counter",
                          first ? "Worker exits on this node, by how they ended." : "",
                          it == exits_.end() ? 0 : it->second, fmt::format("state=\"{}\"", state));
    first = false;
  }
  return out;
}

// The copies to --checkpoint_dir.
std::string AgentMetrics::render_persisted() const {
  std::string out;
  out += prometheus_sample("ddprun_checkpoint_persisted_total", "counter",
                           "Ranks' checkpoints written to --checkpoint_dir.", persisted_);
  out += prometheus_sample("ddprun_checkpoint_persisted_step", "gauge",
                           "The newest step written to --checkpoint_dir (-1: none).",
                           static_cast<double>(persisted_step_));
  out += prometheus_sample("ddprun_checkpoint_persist_seconds", "gauge",
                           "How long the last copy to --checkpoint_dir took.", persist_seconds_);
  bool first = true;
  for (const char* outcome : {"failed", "dropped"}) {
    const auto it = persist_misses_.find(outcome);
    out += prometheus_sample(
        "ddprun_checkpoint_persist_misses_total", "counter",
        first ? "Copies to --checkpoint_dir that failed (a write error) or were dropped (the slot "
                "was reused meanwhile)."
              : "",
        it == persist_misses_.end() ? 0 : it->second, fmt::format("outcome=\"{}\"", outcome));
    first = false;
  }
  return out;
}

// The node check's and the straggler check's verdicts.
std::string AgentMetrics::render_checks() const {
  std::string out;
  out += prometheus_sample("ddprun_node_checks_total", "counter",
                           "Node checks (--node_check) this agent took part in.", node_checks_);
  out += prometheus_sample("ddprun_node_check_seconds", "gauge",
                           "How long the last node check took on this node.", node_check_seconds_);
  bool first = true;
  for (const SlowNode& s : node_check_slow_) {
    out += prometheus_sample(
        "ddprun_node_check_kept_out", "gauge",
        first ? "Nodes the last node check kept out: how many times the round's median their "
                "probe took (0: no answer)."
              : "",
        s.ratio, fmt::format("node=\"{}\",probe=\"{}\"", s.node, s.probe));
    first = false;
  }
  out += prometheus_sample("ddprun_straggler_verdicts_total", "counter",
                           "Nodes this agent, judging its round, named slow while the job trained "
                           "(--straggler_threshold).",
                           stragglers_);
  if (stragglers_ > 0) {
    out += prometheus_sample(
        "ddprun_straggler_held_back", "gauge",
        "The last node named slow: how much longer it made each step (0.41: 41%).",
        straggler_held_back_, fmt::format("node=\"{}\"", straggler_node_));
  }
  return out;
}

// Each restart's phases.
std::string AgentMetrics::render_restarts() const {
  std::string out;
  bool first = true;
  for (const char* phase : kRestartPhases) {
    const auto it = restart_phases_.find(phase);
    out += (it == restart_phases_.end() ? SecondsHistogram() : it->second)
               .render("ddprun_restart_phase_seconds",
                       first ? "Each restart's phases on this node: from the failure to its "
                               "detection, to the workers stopped, to the next round formed, to "
                               "the workers started, to their first progress; and in all."
                             : "",
                       fmt::format("phase=\"{}\"", phase));
    first = false;
  }
  return out;
}

std::string AgentMetrics::render() const {
  return render_round() + render_workers() + render_persisted() + render_checks() +
         render_restarts();
}

}  // namespace ddprun::agent
