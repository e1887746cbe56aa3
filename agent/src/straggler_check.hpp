#pragma once
// The straggler check while a job of more than one node trains (--straggler_threshold): this
// node's ranks time their steps (watchers/step_watch.hpp reads their files), the nodes share
// their windows and node rank 0 judges them (exchanges/straggler.hpp). A verdict is said in the
// log, the event log (event "straggler", and so the metrics), and `ddprun status`; with
// --straggler_action=replace, where the round can re-form without the node (a spare waits, or
// the round is above --nnodes' MIN) and the membership is elastic, the round's flag names the
// node: every node's workers stop, the named node leaves the job as one a node check kept out,
// and the others re-form, restored from the checkpoints in memory. Where the whole job slowed in
// its waits (a slow link lags no node), node rank 0 asks every node to measure its links again,
// as the node check does (topic "link_probe", the round's scope, the first measurement's number),
// and names a node whose link that finds slow the same way. One part of the agent's round loop
// (agent_run.cpp), which tells it when a round's workers start and end.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/agent/agent.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "exchanges/node_check.hpp"
#include "exchanges/straggler.hpp"
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
  // Measures the round's links again from measurement `first_pass` on, every node of the round
  // together (NodeAdmission::measure_again): the verdict, or nullopt where the round ended first.
  using LinkMeasure =
      std::function<boost::asio::awaitable<std::optional<node_check::Verdict>>(int first_pass)>;
  // `r`'s workers are starting: the node shares its windows, node rank 0 judges them, until
  // round_ended(); `measure` measures the round's links when node rank 0 asks.
  void round_started(const rendezvous::Round& r, LinkMeasure measure);
  void round_ended();
  // After `r`'s workers ended: where the round's flag named this node to be replaced, the outcome
  // of a node that stays out.
  std::optional<AgentOutcome> replaced_here(const rendezvous::Round& r) const;
  // No further round (the agent is shutting down).
  void stop() { round_ended(); }

 private:
  struct RoundWatch;
  boost::asio::awaitable<void> watch(std::shared_ptr<RoundWatch> w);
  // Node rank 0, on a slowdown of the whole job: every node measures its links; a node whose link
  // is slow is named, else the job's pace is measured again.
  boost::asio::awaitable<void> look_into_links(std::shared_ptr<RoundWatch> w,
                                               straggler::Slowdown slowed, straggler::Judge& judge);
  // The round's links measured from `first_pass` on (w->measure), cancelled when the round ends:
  // nullopt where it did not complete.
  boost::asio::awaitable<std::optional<node_check::Verdict>> links_measured(
      std::shared_ptr<RoundWatch> w, int first_pass);
  // Another node: measures its links where node rank 0 asked since the last measurement.
  boost::asio::awaitable<void> measure_when_asked(std::shared_ptr<RoundWatch> w);
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
