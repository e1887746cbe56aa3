#pragma once
// The static backend with several nodes: a fixed set of --nnodes agents, node ranks given on the
// command line, node 0's agent hosting the store. Rounds are job-wide attempts. Keys, under the
// job's prefix:
//   nodes/<node_rank>          {"nproc": N, "host": H}: the node's presence key
//   attempt                    the job-wide attempt, advanced only by compare-and-set, so that one
//                              failure anywhere costs the whole job exactly one restart; a node
//                              that leaves costs one too (its ranks cannot be filled)
//   done/<attempt>/<node>      the node's workers all succeeded (the exit barrier)
//   closed                     why the job ended
//   exchange/..., flags/...    the round-scoped exchange (JobSession); the round's scope is its
//                              attempt. A flag in the job's scope (a node's stop) ends the job.
#include <map>
#include <memory>
#include <set>
#include <string>

#include <boost/asio/io_context.hpp>

#include "ddprun/rendezvous/job_session.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/rendezvous/rendezvous_config.hpp"
#include "ddprun/store/store_thread.hpp"

namespace ddprun::rendezvous {

class StaticRendezvous final : public JobSession {
 public:
  // `store`: the job store; `server`: the store this node hosts (node 0), or null.
  static std::shared_ptr<StaticRendezvous> create(boost::asio::io_context& io,
                                                  RendezvousConfig config,
                                                  std::shared_ptr<JobStore> store,
                                                  std::unique_ptr<store::StoreThread> server);
  ~StaticRendezvous() override;

  boost::asio::awaitable<void> join() override;
  boost::asio::awaitable<std::optional<Round>> next_round() override;
  boost::asio::awaitable<std::optional<WorkerStoreAddress>> worker_store(Round r) override;
  boost::asio::awaitable<std::string> interruption(Round r) override;
  boost::asio::awaitable<void> end_round(Round r, bool failed) override;
  boost::asio::awaitable<bool> exit_barrier(Round r) override;
  boost::asio::awaitable<void> close(std::string why) override;
  const JobEnd& ending() const override { return ending_; }
  bool membership_fixed() const override { return true; }
  boost::asio::awaitable<void> leave(bool graceful) override;
  void abandon() override;
  std::string describe() const override;

 private:
  StaticRendezvous(boost::asio::io_context& io, RendezvousConfig config,
                   std::shared_ptr<JobStore> store, std::unique_ptr<store::StoreThread> server,
                   std::unique_ptr<store::StoreThread> worker_server);
  void on_event(const KeyEvent& e) override;
  bool round_over(int number) const override { return attempt_ > number; }
  boost::asio::awaitable<void> advance(int attempt);
  bool present(int node) const { return nodes_.contains(node); }

  RendezvousConfig config_;
  std::unique_ptr<store::StoreThread> server_;
  // With a token, the job's store serves agents only: node 0 hosts the workers' store beside it,
  // and publishes its port under keys::kMaster (0 until this node knows it).
  std::unique_ptr<store::StoreThread> worker_server_;
  int worker_port_ = 0;
  std::map<int, int> nodes_;  // node rank -> nproc
  int attempt_ = 0;
  std::map<int, std::set<int>> done_;
  JobEnd ending_;
};

}  // namespace ddprun::rendezvous
