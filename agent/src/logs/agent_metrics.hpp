#pragma once
// The agent's state for --metrics_port, kept from its own event stream (event_log.hpp): the round,
// the world, restarts and each restart's phases, the nodes seen and checked, each local worker's
// state, and checkpoints persisted.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "logs/seconds_histogram.hpp"

namespace ddprun::agent {

class AgentMetrics {
 public:
  explicit AgentMetrics(int max_restarts) : max_restarts_(max_restarts) {}
  // One event as EventLog::record() received it.
  void consume(const std::string& event, const nlohmann::json& fields);
  // Prometheus text.
  std::string render() const;

 private:
  std::string render_round() const;
  std::string render_workers() const;
  std::string render_persisted() const;
  std::string render_checks() const;
  std::string render_restarts() const;

  int max_restarts_;
  int round_ = -1;
  int restart_count_ = 0;
  int node_rank_ = 0;
  int num_nodes_ = 0;
  int world_size_ = 0;
  int nodes_seen_ = 0;
  int rounds_formed_ = 0;
  bool ended_ = false;
  struct Worker {
    int rank = 0;
    std::string state;  // running, succeeded, failed, stopped
  };
  std::map<int, Worker> workers_;     // by local rank
  std::map<std::string, int> exits_;  // by state: succeeded, failed, stopped
  // --checkpoint_dir: ranks' checkpoints persisted, the newest step among them, the last copy's
  // time, and the copies that failed or were dropped (by outcome).
  int persisted_ = 0;
  int64_t persisted_step_ = -1;
  double persist_seconds_ = 0;
  std::map<std::string, int> persist_misses_;
  // --node_check: checks seen, the last one's time on this node, and the nodes it kept out.
  int node_checks_ = 0;
  double node_check_seconds_ = 0;
  struct SlowNode {
    std::string node;
    std::string probe;
    double ratio = 0;
  };
  std::vector<SlowNode> node_check_slow_;
  // The straggler check (node rank 0's verdicts): how many, and the last one's node and figure.
  int stragglers_ = 0;
  std::string straggler_node_;
  double straggler_held_back_ = 0;
  // Each restart's phases (restart_phases.hpp), by phase, "total" included.
  std::map<std::string, SecondsHistogram> restart_phases_;
};

}  // namespace ddprun::agent
