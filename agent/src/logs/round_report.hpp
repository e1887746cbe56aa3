#pragma once
// What the log, the event log (and so the metrics) and `ddprun status` say of the rounds: one
// formed (and the restart it is, if it is one), and a restart's phases from the failure to the new
// workers' first progress.
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "ddprun/agent/agent.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "logs/event_log.hpp"
#include "workers/restart_phases.hpp"

namespace ddprun::agent {

class RoundReport {
 public:
  // Runs a task beside the job (the publication of a restart's phases), bound to the job.
  using Spawn = std::function<void(boost::asio::awaitable<void>)>;

  // `cfg` and `events` outlive this.
  RoundReport(Spawn spawn, const AgentConfig& cfg, std::shared_ptr<rendezvous::Rendezvous> rdzv,
              EventLog& events);

  // `round` formed: said, with the restart it starts where its restart count grew.
  void formed(const rendezvous::Round& round);
  // The attempt whose `times` these are ended for `cause` ("failure", "hang", "interrupted") and
  // another round follows: the restart's clock runs.
  void attempt_ended(const AttemptTimes& times, std::string cause);
  // The new attempt reached its first progress (or ended without any): the restart under way, if
  // any, is reported phase by phase, once, and published to the job for `ddprun status`.
  void attempt_progressed(const AttemptTimes& times);

 private:
  Spawn spawn_;
  const AgentConfig& cfg_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  EventLog& events_;
  RestartClock clock_;  // the restart under way, phase by phase
  int last_restart_count_ = 0;
};

}  // namespace ddprun::agent
