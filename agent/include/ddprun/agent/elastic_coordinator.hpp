#pragma once
// The elastic (c10d, --nnodes=MIN:MAX) rendezvous, pushed rather than polled. Keys under
// "ddprun/<run_id>/", on a store at --rdzv_endpoint (a standalone ddprund, or an agent's):
//   nodes/<id>          {"nproc", "host"}, bound to the node's presence connection (JobSession)
//   round               the current round, advanced only by compare-and-set
//   rounds/<n>          {"participants": [ids in node-rank order], "nproc": [...], "restarts": r},
//                       decided by the first compare-and-set: survivors of round n-1 keep their
//                       order, newcomers follow (by id), nodes beyond MAX wait as spares
//   masters/<n>         "addr:port" of round n's worker store, hosted by its node rank 0
//   restarts            the job-wide restart count (failures only; membership changes are free)
//   failures/<r>/<id>   a node's worker failures in the round that had restart count r
//   done/<n>/<id>       the node's workers succeeded in round n (exit barrier)
//   closed              why the job ended; later joiners leave with that message
// A round forms at MAX nodes at once, or at MIN after last_call_timeout. It ends when a
// participant's key vanishes (death or partition), when a node waits to join below MAX (scale-up),
// or on a failure.
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/agent/job_session.hpp"

namespace ddprun::agent {

struct ElasticSpec {
  SessionSpec session;
  std::string node_id;
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc = 1;
  std::string host;
  std::chrono::milliseconds last_call_timeout{30'000};
  std::chrono::milliseconds barrier_timeout{300'000};
};

struct ElasticRound {
  int number = 0;
  int node_rank = 0;
  int num_nodes = 0;
  int base_rank = 0;
  int world_size = 0;
  int restarts = 0;
  std::vector<std::string> participants;
};

class ElasticCoordinator final : public JobSession {
 public:
  static boost::asio::awaitable<std::shared_ptr<ElasticCoordinator>> join(
      boost::asio::any_io_executor ex, ElasticSpec spec);

  int restarts() const { return restarts_; }
  // Why the job ended, once it has.
  const std::optional<std::string>& closed() const { return closed_; }
  // Forms or follows the current round, waiting as a spare while this node is not in it. nullopt
  // once the job is closed. Throws rendezvous::StoreTimeout if fewer than MIN nodes join in
  // join_timeout.
  boost::asio::awaitable<std::optional<ElasticRound>> next_round();
  boost::asio::awaitable<void> publish_master(const ElasticRound& r, const std::string& addr,
                                              int port);
  // Waits (join_timeout) for the round's worker store address.
  boost::asio::awaitable<std::pair<std::string, int>> master(const ElasticRound& r);
  // Completes when `r` must end on this node, with why; stop_waiting() makes it return "". (Takes
  // the round by value: it runs detached, beyond the caller's copy.)
  boost::asio::awaitable<std::string> membership_event(ElasticRound r);
  // Ends round `r` (no-op if it ended already); a failed round costs one restart, once.
  boost::asio::awaitable<void> end_round(const ElasticRound& r, bool failed);
  boost::asio::awaitable<void> report_failure(const ElasticRound& r,
                                              const std::vector<WorkerFailure>& failures);
  // Every node's failures recorded under restart count `restarts`.
  boost::asio::awaitable<std::vector<WorkerFailure>> failures(int restarts);
  // True once every participant of `r` succeeded; false when the round ends first or on timeout.
  boost::asio::awaitable<bool> exit_barrier(const ElasticRound& r);
  boost::asio::awaitable<void> close(const std::string& why);
  // For an agent hosting the store: waits (at most `limit`) until the other nodes have left.
  boost::asio::awaitable<void> outlast_peers(std::chrono::milliseconds limit);

 private:
  struct Record {
    std::vector<std::string> participants;
    std::vector<int> nproc;
    int restarts = 0;
  };
  ElasticCoordinator(boost::asio::any_io_executor ex, ElasticSpec spec);
  void on_event(const std::string& key, const rendezvous::WatchEventRecord& e) override;
  std::string propose(int round) const;
  static Record parse_record(const std::string& json);

  ElasticSpec spec_;
  std::map<std::string, int> nodes_;  // id -> nproc
  int round_ = 0;
  std::map<int, Record> rounds_;
  std::map<int, std::string> masters_;
  int restarts_ = 0;
  std::map<int, std::set<std::string>> done_;
  std::optional<std::string> closed_;
};

}  // namespace ddprun::agent
