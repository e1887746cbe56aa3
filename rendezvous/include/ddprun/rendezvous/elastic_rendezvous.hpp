#pragma once
// The elastic (c10d, --nnodes=MIN:MAX) rendezvous, pushed rather than polled. Keys under the job's
// prefix:
//   nodes/<id>          {"nproc", "host"}: the node's presence key
//   round               the current round, advanced only by compare-and-set
//   rounds/<n>          {"participants": [ids in node-rank order], "nproc": [...], "restarts": r},
//                       decided by the first compare-and-set: survivors of round n-1 keep their
//                       order, newcomers follow (by id), nodes beyond MAX wait as spares
//   masters/<n>         "addr:port" of round n's worker store, hosted by its node rank 0
//   restarts            the job-wide restart count (failures only; membership changes are free)
//   failures/<r>/<id>   a node's worker failures in the round that had restart count r
//   done/<n>/<id>       the node's workers succeeded in round n (exit barrier)
//   closed              why the job ended ("succeeded", "failed"); later joiners leave with it
// A round forms at MAX nodes at once, or at MIN after last_call_timeout. It ends when a
// participant's key vanishes (death or partition), when a node waits to join below MAX (scale-up),
// or on a failure.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "ddprun/rendezvous/job_session.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/rendezvous/rendezvous_config.hpp"
#include "ddprun/rendezvous/store_thread.hpp"

namespace ddprun::rendezvous {

class ElasticRendezvous final : public JobSession, public Rendezvous {
 public:
  // `node_id`: unique among the job's agents. `server`: the job store when this agent hosts it.
  static std::shared_ptr<ElasticRendezvous> create(boost::asio::io_context& io,
                                                   RendezvousConfig config, std::string node_id,
                                                   std::shared_ptr<JobStore> store,
                                                   std::unique_ptr<StoreThread> server);
  ~ElasticRendezvous() override;

  boost::asio::awaitable<void> join() override;
  boost::asio::awaitable<std::optional<Round>> next_round() override;
  boost::asio::awaitable<WorkerStoreAddress> worker_store(Round r) override;
  boost::asio::awaitable<std::string> interruption(Round r) override;
  void stop_waiting() override { JobSession::stop_waiting(); }
  boost::asio::awaitable<void> report_failure(Round r, std::string failures) override;
  // Membership changes cost no restart.
  boost::asio::awaitable<void> end_round(Round r) override;
  boost::asio::awaitable<bool> exit_barrier(Round r) override;
  boost::asio::awaitable<void> close(std::string why) override;
  const JobEnd& ending() const override { return ending_; }
  boost::asio::awaitable<std::vector<std::string>> final_failures() override;
  boost::asio::awaitable<void> leave(bool graceful) override;
  void abandon() override;
  std::string describe() const override;
  void watch_membership(std::function<void(const MembershipChange&)> listener) override {
    set_membership_listener(std::move(listener));
  }

  const std::string& node_id() const { return node_id_; }

 private:
  struct Record {
    std::vector<std::string> participants;
    std::vector<int> nproc;
    int restarts = 0;
  };
  ElasticRendezvous(boost::asio::io_context& io, RendezvousConfig config, std::string node_id,
                    std::shared_ptr<JobStore> store, std::unique_ptr<StoreThread> server);
  void on_event(const KeyEvent& e) override;
  std::string propose(int round) const;
  static Record parse_record(const std::string& json);
  boost::asio::awaitable<void> advance_round(int number, bool failed, int restarts);
  bool ended(bool ran);

  boost::asio::io_context& io_;
  RendezvousConfig config_;
  std::string node_id_;
  std::unique_ptr<StoreThread> server_;        // the job store, when hosted here
  std::unique_ptr<StoreThread> round_server_;  // the current round's worker store (node rank 0)
  std::map<std::string, int> nodes_;           // id -> nproc
  int round_ = 0;
  std::map<int, Record> rounds_;
  std::map<int, std::string> masters_;
  int restarts_ = 0;
  std::map<int, std::set<std::string>> done_;
  std::optional<std::string> closed_;
  bool ran_ = false;  // this node took part in a round
  JobEnd ending_;
};

}  // namespace ddprun::rendezvous
