#pragma once
// What the agent sees of a job's rendezvous: rounds. The agent runs one loop over this interface
// whatever the backend:
//
//   join();
//   while (auto round = co_await next_round()) {
//     worker_store(*round) -> spawn the workers, watch interruption(*round) beside them;
//     succeeded: exit_barrier(*round) -> close("succeeded")   failed, interrupted: end_round()
//     what nodes share in a round (a stop, a hang, failure reports): publish/gather, raise/raised
//   }
//   ending() says why the loop ended; leave().
//
// The handler owns the policy: how a round forms, which nodes take part, what ending a round costs
// (a failure always costs one restart of the job-wide budget; a membership change costs one on the
// static backend and none on the elastic one), and where each round's workers find their store.
// Coroutine parameters are taken by value (the callee owns them); the caller keeps the object alive
// (shared_ptr) while any of its coroutines runs.
#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ddprun/job_store/job_store.hpp"

namespace ddprun::rendezvous {

struct Round {
  int number = 0;         // rounds of this job before this one
  int restart_count = 0;  // failed rounds before this one, job-wide (TORCHELASTIC_RESTART_COUNT)
  int node_rank = 0;
  int num_nodes = 1;
  int base_rank = 0;  // global rank of this node's local rank 0
  int world_size = 0;
  // The nodes' ids, in node rank order: always where the backend fixes them (static, a single
  // node), on an elastic job where the agent asked for them (Rendezvous::want_members()).
  std::vector<std::string> members;

  // Node `rank` of the round by its id where the round names its members, else by its node rank.
  std::string member(int rank) const {
    const auto i = static_cast<size_t>(rank);
    return rank >= 0 && i < members.size() ? members[i] : std::to_string(rank);
  }
};

// A node joining or leaving the job, as this node sees it (its own joining included).
struct MembershipChange {
  std::string node;  // its id: a node rank (static) or host_pid_nonce (elastic)
  std::string host;
  int nproc = 0;
  bool joined = true;
};

struct WorkerStoreAddress {
  std::string addr;  // MASTER_ADDR
  int port = 0;      // MASTER_PORT
};

// Where a value or a flag of the round-scoped exchange (Rendezvous::publish, raise) lives: one
// round, the round that had a given restart count (the one that failed with it), or the job.
//
// A round's scope is its number's, and counts only the round's members where the round names them
// (Round::members): two memberships can carry one number (after a store restart a node puts back
// the values of the round it knew while others form a new round of that number), and what a node
// of the other said there is not this round's.
class Scope {
 public:
  static Scope job() { return Scope("job"); }
  static Scope of(const Round& r) {
    Scope s("round/" + std::to_string(r.number));
    s.round_ = r.number;
    s.members_ = r.members;
    return s;
  }
  static Scope restart(int restart_count) {
    return Scope("restart/" + std::to_string(restart_count));
  }
  // "job", "round/<n>" or "restart/<n>": the scope's part of its keys.
  const std::string& text() const { return text_; }
  // The round's number, for a round's scope.
  std::optional<int> round() const { return round_; }
  // Whether node `id`'s values and flags count in this scope: those of the round's members where
  // it names them, every node's otherwise.
  bool counts(std::string_view id) const {
    return members_.empty() || std::find(members_.begin(), members_.end(), id) != members_.end();
  }
  bool operator==(const Scope& o) const { return text_ == o.text_; }

 private:
  explicit Scope(std::string text) : text_(std::move(text)) {}
  std::string text_;
  std::optional<int> round_;
  std::vector<std::string> members_;
};

// A flag raised in the exchange: by which node, what its peers are told, and data for the feature.
struct Flag {
  std::string node;  // the id of the node that raised it
  std::string reason;
  std::string detail;
  bool mine = false;  // raised by this node
};

// The topic under which each node publishes its workers' failures, in the scope of its round's
// restart count: `ddprun status` shows the last ones (job_status.hpp).
inline constexpr const char* kFailureReportsTopic = "failures";
// The topic, in the job's scope, of each node's account of its checkpoints (a JSON object the
// agent writes), which `ddprun status` shows.
inline constexpr const char* kCheckpointsTopic = "checkpoints";
// The topic, in the job's scope, of each node's last restart's phases (RestartPhases' JSON), which
// `ddprun status` shows.
inline constexpr const char* kRestartTopic = "restart";
// The topic, in the job's scope, of the last node check's verdict (published by the node that
// judged it), which `ddprun status` shows.
inline constexpr const char* kNodeCheckTopic = "node_check";
// The topic, in the job's scope, of the last straggler verdict (published by the node that judged
// it), which `ddprun status` shows.
inline constexpr const char* kStragglerTopic = "straggler";

// Why next_round() returned nullopt.
struct JobEnd {
  enum class Kind {
    kSucceeded,          // every node's workers succeeded
    kRestartsExhausted,  // a failure found no restart left: final_failures() says what failed
    kClosed              // the job had ended before this node took part
  };
  Kind kind = Kind::kSucceeded;
  std::string why;
};

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;

  // Connects and announces this node. Throws StoreError when the store cannot be reached within the
  // join timeout.
  virtual boost::asio::awaitable<void> join() = 0;
  // Forms or follows the next round and returns this node's place in it, waiting as a spare while
  // the round is full. nullopt once the job has ended (ending() says how). Throws StoreTimeout when
  // too few nodes join within the join timeout, and StoreConnectionError when the store is lost.
  virtual boost::asio::awaitable<std::optional<Round>> next_round() = 0;
  // Where the round's workers find their store; hosts it when this node does. nullopt when the
  // round ended before its store was known (superseded, the job closed, this node expelled): no
  // worker may start in it, and interruption(r) says why.
  virtual boost::asio::awaitable<std::optional<WorkerStoreAddress>> worker_store(Round r) = 0;
  // Completes with why `r` must end on this node because of something outside it (a peer failed,
  // left or joined, raised a flag, the job was closed); with "" after stop_waiting().
  virtual boost::asio::awaitable<std::string> interruption(Round r) = 0;
  // Releases a pending interruption() (the workers ended on their own).
  virtual void stop_waiting() = 0;
  // Ends `r` on this node's behalf (a no-op if it already ended): `failed` when its workers failed
  // there, which spends one restart of the job-wide budget. A round interrupted by another node's
  // flag (raise()) in its scope is a failed one too.
  virtual boost::asio::awaitable<void> end_round(Round r, bool failed) = 0;
  // This node's workers succeeded in `r`: true once every node's did; false as soon as a peer
  // fails, its agent dies, or the barrier timeout passes.
  virtual boost::asio::awaitable<bool> exit_barrier(Round r) = 0;
  // Ends the job for every node (later joiners are told `why`).
  virtual boost::asio::awaitable<void> close(std::string why) = 0;
  // Set once next_round() has returned nullopt.
  virtual const JobEnd& ending() const = 0;
  // Whether the job's membership is fixed (the static backend): a node that stops ends the job,
  // since its ranks cannot be filled; an elastic job re-forms without it instead.
  virtual bool membership_fixed() const { return false; }

  // The round-scoped exchange: what the nodes share within a round (or the job), one mechanism
  // for every feature. Each node publishes a value per topic and reads every node's; any node
  // raises a flag per topic, which the first raise fixes and every node sees.
  //
  // Publishes this node's `value` for `topic` in `scope` (a later publish replaces it). Throws
  // StoreError when the store cannot take it.
  virtual boost::asio::awaitable<void> publish(Scope scope, std::string topic,
                                               std::string value) = 0;
  // Every node's value for `topic` in `scope`, this node's included, ordered by node id (not by
  // node rank: a caller that needs rank order puts its id in the value): once
  // `expected` nodes have published, or `wait` has passed, or (a round's scope) the round has
  // ended; then what came. Never throws: what cannot be read is left out (logged), and leaving the
  // job ends the wait.
  virtual boost::asio::awaitable<std::vector<std::string>> gather(
      Scope scope, std::string topic, int expected, std::chrono::milliseconds wait) = 0;
  // Raises the flag `topic` in `scope` with `reason` (what the others are told) and `detail`
  // (data for the feature); a flag already raised stays as it is. A flag raised by another node
  // in a round's scope or the job's interrupts that round on every node (interruption() says
  // `reason`); one in the job's scope, where membership_fixed(), also ends the job (next_round()
  // returns nullopt, JobEnd::Kind::kClosed). Never throws (a store error is logged); a node that
  // is not a member of the job (not yet joined, or gone) raises nothing.
  virtual boost::asio::awaitable<void> raise(Scope scope, std::string topic, std::string reason,
                                             std::string detail) = 0;
  // The flag `topic` in `scope` once any node has raised it (this one included).
  virtual std::optional<Flag> raised(Scope scope, std::string topic) const = 0;
  // Whether round `r` has ended as this node sees it (a newer round is forming, or the job
  // ended): what ends a gather in its scope before its wait. The default: never.
  virtual bool round_ended(const Round& r) const {
    (void)r;
    return false;
  }
  // A secret every node of the job shares, as hard to get as joining the job: 64 hex digits of
  // randomness that the first node to ask writes into the job's store (first writer wins), and
  // every later one reads. For what the job's nodes serve each other where the job has no token
  // (the checkpoint copies). Throws StoreError when the store cannot give it.
  virtual boost::asio::awaitable<std::string> job_secret() = 0;
  // Leaves the job. Graceful: a node hosting the job's store first waits (bounded) until the others
  // have left, so that none loses the store while reading the outcome.
  virtual boost::asio::awaitable<void> leave(bool graceful) = 0;
  // Stops at once everything this node hosts and closes its connections; idempotent.
  virtual void abandon() = 0;
  // For the agent's first log line: the kind of job and where its store is.
  virtual std::string describe() const = 0;
  // This node's wall clock against the job store's, measured when it joined; nullopt where it was
  // not (a store that cannot tell its time, a single-node job).
  virtual std::optional<ClockOffset> clock_offset() const { return std::nullopt; }
  // From now on, every round next_round() returns names its members (Round::members): on an
  // elastic job each node then reads the round's record, which grows with the job, so only an
  // agent with a part that needs them asks (the node check, checkpoints, the event log).
  virtual void want_members() {}
  // Calls `listener` on the io_context for every node seen joining or leaving the job, from
  // join() on (for the event log). A single-node job has no membership: the default ignores it.
  virtual void watch_membership(std::function<void(const MembershipChange&)> listener) {
    (void)listener;
  }
  // Calls `listener` on the io_context each time next_round() begins to wait as a spare (the round
  // is full), before it waits: for what a spare node prepares while it waits (standby workers). A
  // backend without spares never calls it: the default ignores it.
  virtual void on_spare(std::function<void()> listener) { (void)listener; }
};

}  // namespace ddprun::rendezvous
