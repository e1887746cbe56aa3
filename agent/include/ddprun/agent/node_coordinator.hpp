#pragma once
// How the agents of a multi-node job (static backend) agree, through the store. Keys, under
// "ddprun/<run_id>/":
//   nodes/<node_rank>             {"nproc": N, "host": H}, bound to the node's presence connection
//                                 (SET_OWNED + KEEPALIVE): it vanishes when the agent dies or is
//                                 cut off for longer than the heartbeat timeout, measured by the
//                                 server.
//   attempt                       the job-wide restart count, advanced only by compare-and-set, so
//   one
//                                 failure anywhere costs the whole job exactly one restart.
//   failures/<attempt>/<node>     that node's worker failures in that attempt (JSON).
//   done/<attempt>/<node>         the node's workers all succeeded (the exit barrier).
// One watch on the prefix mirrors these keys; nothing is polled.
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/agent/job_session.hpp"

namespace ddprun::agent {

struct NodeSpec {
  std::string run_id;
  int node_rank = 0;
  int num_nodes = 1;
  int nproc = 1;
  std::string host;
  std::string store_host;
  int store_port = 0;
  std::chrono::milliseconds join_timeout{600'000};
  std::chrono::milliseconds heartbeat_timeout{5'000};
  std::chrono::milliseconds barrier_timeout{300'000};
};

// This node's share of the job in one attempt.
struct NodePlacement {
  int attempt = 0;
  int base_rank = 0;  // global rank of local rank 0
  int world_size = 0;
};

class NodeCoordinator final : public JobSession {
 public:
  // Connects (retrying until join_timeout while node 0's store comes up) and announces this node.
  static boost::asio::awaitable<std::shared_ptr<NodeCoordinator>> join(
      boost::asio::any_io_executor ex, NodeSpec spec);

  // The job's current attempt as this node knows it (its own advances included).
  int attempt() const { return attempt_; }
  // Waits until every node is present (throws rendezvous::StoreTimeout after join_timeout, naming
  // the missing nodes) and returns this node's ranks for the current attempt.
  boost::asio::awaitable<NodePlacement> placement();
  // Completes when `attempt` must end on this node because of another node: the attempt was
  // advanced (a failure elsewhere) or a node vanished. Returns why. Cancel with stop_waiting().
  boost::asio::awaitable<std::string> peer_event(int attempt);
  // Advances the job past `attempt` (no-op if another node already did).
  boost::asio::awaitable<void> advance(int attempt);
  // Records this node's failures of `attempt` and advances the job past it.
  boost::asio::awaitable<void> report_failure(int attempt,
                                              const std::vector<WorkerFailure>& failures);
  // Every node's recorded failures of `attempt`.
  boost::asio::awaitable<std::vector<WorkerFailure>> failures(int attempt);
  // This node's workers succeeded in `attempt`. True once every node's did; false as soon as the
  // attempt advances (a peer failed) or after barrier_timeout.
  boost::asio::awaitable<bool> exit_barrier(int attempt);
  // For the node hosting the store: waits until every other node has left (their keys vanish when
  // their agents close), at most `limit`, so that none loses the store while reading the outcome.
  boost::asio::awaitable<void> outlast_peers(std::chrono::milliseconds limit);

 private:
  NodeCoordinator(boost::asio::any_io_executor ex, NodeSpec spec);
  void on_event(const std::string& key, const rendezvous::WatchEventRecord& e) override;

  NodeSpec spec_;
  std::map<int, int> nodes_;  // node rank -> nproc
  int attempt_ = 0;
  std::map<int, std::set<int>> done_;
};

}  // namespace ddprun::agent
