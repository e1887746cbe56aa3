#pragma once
// The elastic (c10d, --nnodes=MIN:MAX) rendezvous, pushed rather than polled, and linear in the
// number of agents: one agent, the leader, follows the membership and decides the rounds; every
// other agent follows a few job-wide keys and its own placement. Keys under the job's prefix:
//   settings            the job-wide settings (see JobSession::agree_on)
//   nodes/<id>          {"nproc", "host", "since_ms"}: the node's presence key
//   leader              the leader's id, claimed (JobStore::claim): it vanishes with the leader,
//                       and the agents that see it go claim it again; the first one wins
//   round               the current round, advanced only by compare-and-set
//   rounds/<n>          {"participants": [ids in node-rank order], "nproc": [...], "restarts": r},
//                       decided by the leader's compare-and-set: survivors of round n-1 keep their
//                       order, newcomers follow (by id), nodes beyond MAX wait as spares
//   place/<id>          {"round": n, "node_rank", "num_nodes", "base_rank", "world_size",
//                       "restarts"} or {"round": n, "spare": true}: the node's part in round n
//   master              "<n> addr:port": round n's worker store, hosted by its node rank 0
//   interrupt           "<n> <reason>": why the leader ended round n (a node left, a scale-up)
//   finished            "<n>": every participant of round n passed the exit barrier
//   restarts            the job-wide restart count (failures only; membership changes are free)
//   done/<n>/<id>       the node's workers succeeded in round n (exit barrier)
//   closed              why the job ended ("succeeded", "failed"); later joiners leave with it
//   exchange/..., flags/...  the round-scoped exchange (JobSession): failure reports, a hang
// The leader follows nodes/, rounds/ and done/. A round forms at MAX nodes at once, or
// at MIN after last_call_timeout (the first round; later ones re-form at once). The leader ends it
// when a participant's key vanishes (death or partition) or a node waits to join below MAX
// (scale-up); any agent ends it on a failure. A node join costs one event (the leader's), a round
// one record and one placement per node: nothing any agent does grows with the job's size, but
// the leader's work, which grows linearly.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "ddprun/rendezvous/job_records.hpp"
#include "ddprun/rendezvous/job_session.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/rendezvous/rendezvous_config.hpp"
#include "ddprun/store/store_thread.hpp"

namespace ddprun::rendezvous {

class ElasticRendezvous final : public JobSession {
 public:
  // `node_id`: unique among the job's agents. `server`: the job store when this agent hosts it.
  static std::shared_ptr<ElasticRendezvous> create(boost::asio::io_context& io,
                                                   RendezvousConfig config, std::string node_id,
                                                   std::shared_ptr<JobStore> store,
                                                   std::unique_ptr<store::StoreThread> server);
  ~ElasticRendezvous() override;

  boost::asio::awaitable<void> join() override;
  boost::asio::awaitable<std::optional<Round>> next_round() override;
  boost::asio::awaitable<std::optional<WorkerStoreAddress>> worker_store(Round r) override;
  boost::asio::awaitable<std::string> interruption(Round r) override;
  // Membership changes cost no restart; another node's flag (a hang) does.
  boost::asio::awaitable<void> end_round(Round r, bool failed) override;
  boost::asio::awaitable<bool> exit_barrier(Round r) override;
  boost::asio::awaitable<void> close(std::string why) override;
  const JobEnd& ending() const override { return ending_; }
  boost::asio::awaitable<void> leave(bool graceful) override;
  void abandon() override;
  std::string describe() const override;
  void on_spare(std::function<void()> listener) override { on_spare_ = std::move(listener); }

  const std::string& node_id() const { return node_id_; }

 private:
  // A node's part in a round (place/<id>).
  struct Placement {
    int round = -1;
    bool spare = false;
    int node_rank = 0;
    int num_nodes = 0;
    int base_rank = 0;
    int world_size = 0;
    int restarts = 0;
  };
  // A value tagged with the round it is about ("<n> <text>").
  struct Tagged {
    int round = -1;
    std::string text;
  };
  ElasticRendezvous(boost::asio::io_context& io, RendezvousConfig config, std::string node_id,
                    std::shared_ptr<JobStore> store, std::unique_ptr<store::StoreThread> server);
  void on_event(const KeyEvent& e) override;
  bool round_over(int number) const override { return round_ > number || closed_.has_value(); }
  std::string propose(int round) const;
  static records::Round parse_record(const std::string& text);
  static Placement parse_placement(const std::string& json);
  static std::string placement_record(const records::Round& rec, int round, const std::string& id);
  static Tagged parse_tagged(const std::string& value);
  boost::asio::awaitable<void> advance_round(int number, bool failed, int restarts);
  // Round r cannot start (`why`, within the join timeout): the job goes on to a new round.
  boost::asio::awaitable<void> abandon_round(Round r, std::string why);
  bool ended(bool ran);
  bool leading() const { return leader_ == node_id_; }
  // Claims the leadership whenever nobody holds it, and leads while this agent holds it.
  boost::asio::awaitable<void> leadership();
  boost::asio::awaitable<void> lead();
  // One pass of the leader's work on the current round; returns when it next needs a look
  // without any event (the last call's end), or time_point::max().
  boost::asio::awaitable<std::chrono::steady_clock::time_point> lead_step();
  // The leader's writes: made only while this agent holds the leader key (JobStore::
  // set_all_holding, and compare_set_holding for a round's record); false, said once, where it no
  // longer does.
  boost::asio::awaitable<bool> write_as_leader(
      std::vector<std::pair<std::string, std::string>> entries);
  // Returns `held`; says once that the leadership lapsed where it is false.
  bool held_leadership(bool held);
  // When lead_step looks again after a write refused at `now` (or at the next event: the watch
  // brings the leader key's change meanwhile, and this node stops leading).
  std::chrono::steady_clock::time_point after_refusal(
      std::chrono::steady_clock::time_point now) const;
  // Ends round `n` as its leader: says why (once), then advances the round; false where the
  // leadership had lapsed (nothing done).
  boost::asio::awaitable<bool> end_led_round(int n, std::string why, int restarts);
  // lead_step's parts: round `n` proposed once it may form (returns as lead_step does), and every
  // present node told its part in formed round `n` (record `rec`; false where the leadership had
  // lapsed).
  boost::asio::awaitable<std::chrono::steady_clock::time_point> form_round(
      int n, std::chrono::steady_clock::time_point now);
  boost::asio::awaitable<bool> place_nodes(int n, const records::Round& rec);
  // Why round `n` (record `rec`) must end now, or "".
  std::string reason_to_end(int n, const records::Round& rec) const;

  RendezvousConfig config_;
  std::string node_id_;
  std::unique_ptr<store::StoreThread> server_;  // the job store, when hosted here
  std::unique_ptr<store::StoreThread>
      round_server_;  // the current round's worker store (node rank 0)
  // Followed by every agent.
  std::optional<std::string> leader_;
  int round_ = 0;
  int restarts_ = 0;
  std::optional<std::string> closed_;
  Placement place_;  // this node's
  Tagged master_;
  // This node's address towards the job's store (--local_addr where given): in its presence
  // record, and the address of the worker stores it hosts.
  std::string addr_;
  Tagged interrupt_;
  int finished_ = -1;
  uint64_t events_ = 0;  // key changes seen, for the leader to wait on
  // Followed by the leader (and, nodes_, by an agent with a membership listener or that hosts the
  // store).
  std::map<std::string, int> nodes_;  // id -> nproc
  uint64_t membership_ = 0;           // changes of nodes_ seen
  std::map<int, records::Round> rounds_;
  std::map<int, std::set<std::string>> done_;
  // Node 0 of a round: the members that have stopped their previous workers (ready/<round>/<id>).
  std::map<int, std::set<std::string>> ready_;
  bool follows_ready_ = false;
  // The leader's own bookkeeping.
  std::map<std::string, int> placed_;  // id -> the round its placement was written for
  bool deposed_ = false;               // the last write as the leader was refused (and said)
  // The (round, membership_) whose end conditions and placements were last settled.
  std::optional<std::pair<int, uint64_t>> checked_;
  std::optional<std::pair<int, std::chrono::steady_clock::time_point>> last_call_;  // round, end
  bool ran_ = false;                // this node took part in a round
  std::function<void()> on_spare_;  // called as next_round() begins to wait as a spare
  JobEnd ending_;
};

}  // namespace ddprun::rendezvous
