#pragma once
// The straggler check while a job of more than one node trains (--straggler_threshold): this
// node's ranks time their steps (watchers/step_watch.hpp reads their files), the nodes share
// their windows and node rank 0 judges them (exchanges/straggler.hpp). A verdict is said in the
// log, the event log (event "straggler", and so the metrics), and `ddprun status`; with
// --straggler_action=replace, where the round can re-form without the node (a spare waits, or
// the round is above --nnodes' MIN) and the membership is elastic, the round's flag names the
// node: every node's workers stop, the named node leaves the job as one a node check kept out,
// and the others re-form, restored from the checkpoints in memory. One part of the agent's round
// loop (agent_run.cpp), which tells it when a round's workers start and end.
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/agent/agent.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "logs/event_log.hpp"
#include "watchers/step_watch.hpp"

namespace ddprun::agent {

class StragglerCheck {
 public:
  // Everything given outlives this.
  StragglerCheck(boost::asio::io_context& io, const AgentConfig& cfg,
                 std::shared_ptr<rendezvous::Rendezvous> rdzv, EventLog& events);
  ~StragglerCheck();
  StragglerCheck(const StragglerCheck&) = delete;
  StragglerCheck& operator=(const StragglerCheck&) = delete;

  // Whether the job is watched (more than one node may take part, and a threshold).
  bool watched() const { return watched_; }
  // Where the workers' step times go, for WorkerGroup::watch_steps.
  std::shared_ptr<StepSamples> samples() const { return samples_; }
  // A node seen joining (or leaving) the job, this one included: spares are the nodes present
  // beyond a round's.
  void node_seen(bool joined) { present_ += joined ? 1 : -1; }
  // `r`'s workers are starting: the node shares its windows, node rank 0 judges them, until
  // round_ended().
  void round_started(const rendezvous::Round& r);
  void round_ended();
  // After `r`'s workers ended: where the round's flag named this node to be replaced, the outcome
  // of a node that stays out.
  std::optional<AgentOutcome> replaced_here(const rendezvous::Round& r) const;
  // No further round (the agent is shutting down).
  void stop() { round_ended(); }

 private:
  struct RoundWatch;
  boost::asio::awaitable<void> watch(std::shared_ptr<RoundWatch> w);
  // Node rank 0's verdict `line` on node `node_rank` of `r`: said, and acted on.
  boost::asio::awaitable<void> act(const rendezvous::Round& r, int node_rank,
                                   nlohmann::json verdict, std::string line);

  boost::asio::io_context& io_;
  const AgentConfig& cfg_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  EventLog& events_;
  bool watched_;
  std::shared_ptr<StepSamples> samples_ = std::make_shared<StepSamples>();
  int present_ = 0;
  std::shared_ptr<RoundWatch> round_;  // the round being watched
};

}  // namespace ddprun::agent
