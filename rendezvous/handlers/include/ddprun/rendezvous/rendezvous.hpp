#pragma once
// What the agent sees of a job's rendezvous: rounds. The agent runs one loop over this interface
// whatever the backend:
//
//   join();
//   while (auto round = co_await next_round()) {
//     worker_store(*round) -> spawn the workers, watch interruption(*round) beside them;
//     succeeded: exit_barrier(*round) -> close("succeeded")   failed: report_failure(*round, ...)
//     interrupted: end_round(*round)
//   }
//   ending() says why the loop ended; leave().
//
// The handler owns the policy: how a round forms, which nodes take part, what ending a round costs
// (a failure always costs one restart of the job-wide budget; a membership change costs one on the
// static backend and none on the elastic one), and where each round's workers find their store.
// Coroutine parameters are taken by value (the callee owns them); the caller keeps the object alive
// (shared_ptr) while any of its coroutines runs.
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

namespace ddprun::rendezvous {

struct Round {
  int number = 0;         // rounds of this job before this one
  int restart_count = 0;  // failed rounds before this one, job-wide (TORCHELASTIC_RESTART_COUNT)
  int node_rank = 0;
  int num_nodes = 1;
  int base_rank = 0;  // global rank of this node's local rank 0
  int world_size = 0;
  std::vector<std::string> members;  // the nodes' ids, in node rank order
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
  // left or joined, the job was closed); with "" after stop_waiting().
  virtual boost::asio::awaitable<std::string> interruption(Round r) = 0;
  // Releases a pending interruption() (the workers ended on their own).
  virtual void stop_waiting() = 0;
  // This node was stopped by signal `signo` (forwarded to its workers). Where one node's stop ends
  // the whole job (the static backend: its ranks cannot be filled), the others are told, so that
  // their workers get the same signal rather than a stop for a lost peer, whichever reaches them
  // first; an elastic job re-forms without the node instead. Never throws.
  virtual boost::asio::awaitable<void> announce_stop(int signo) {
    (void)signo;
    co_return;
  }
  // The signal a peer announced with announce_stop() (0: none), once interruption() has said so.
  virtual int peer_stop_signal() const { return 0; }
  // A rank of this node is hung in `r` (--hang_timeout): every other node of the round is told, so
  // that it captures its own ranks' stacks before they stop (interruption() then says so, and
  // peer_hang() is true there). Never throws. The default, for a single-node job: nothing to tell.
  virtual boost::asio::awaitable<void> announce_hang(Round r) {
    (void)r;
    co_return;
  }
  // Whether `r` is being interrupted because another node declared a hang in it.
  virtual bool peer_hang(Round r) const {
    (void)r;
    return false;
  }
  // After a hang in `r`, once this node has frozen its workers: says so, and returns once every
  // node of the round has, or `wait` has passed. Never throws.
  virtual boost::asio::awaitable<void> hang_frozen(Round r, std::chrono::milliseconds wait) {
    (void)r;
    (void)wait;
    co_return;
  }
  // After a hang in `r`: publishes this node's ranks' innermost frames (`frames`, opaque text) and
  // returns every node's, this node's included, once each node of the round has published its own
  // or `wait` has passed (then what came). Never throws: what cannot be shared is left out.
  virtual boost::asio::awaitable<std::vector<std::string>> share_hang_frames(
      Round r, std::string frames, std::chrono::milliseconds wait) {
    (void)r;
    (void)wait;
    std::vector<std::string> out;
    out.push_back(std::move(frames));
    co_return out;
  }
  // Records this node's worker failures in `r` (opaque text, read back by final_failures()) and
  // ends the round as failed.
  virtual boost::asio::awaitable<void> report_failure(Round r, std::string failures) = 0;
  // Ends `r` after an interruption (a no-op if it already ended).
  virtual boost::asio::awaitable<void> end_round(Round r) = 0;
  // This node's workers succeeded in `r`: true once every node's did; false as soon as a peer
  // fails, its agent dies, or the barrier timeout passes.
  virtual boost::asio::awaitable<bool> exit_barrier(Round r) = 0;
  // Ends the job for every node (later joiners are told `why`).
  virtual boost::asio::awaitable<void> close(std::string why) = 0;
  // Set once next_round() has returned nullopt.
  virtual const JobEnd& ending() const = 0;
  // Every node's failures (as given to report_failure) in the round that spent the last restart.
  virtual boost::asio::awaitable<std::vector<std::string>> final_failures() = 0;
  // Leaves the job. Graceful: a node hosting the job's store first waits (bounded) until the others
  // have left, so that none loses the store while reading the outcome.
  virtual boost::asio::awaitable<void> leave(bool graceful) = 0;
  // Stops at once everything this node hosts and closes its connections; idempotent.
  virtual void abandon() = 0;
  // For the agent's first log line: the kind of job and where its store is.
  virtual std::string describe() const = 0;
  // Calls `listener` on the io_context for every node seen joining or leaving the job, from
  // join() on (for the event log). A single-node job has no membership: the default ignores it.
  virtual void watch_membership(std::function<void(const MembershipChange&)> listener) {
    (void)listener;
  }
};

}  // namespace ddprun::rendezvous
