#pragma once
// How long each restart took, phase by phase, on this node's steady clock: from the failure to its
// detection, to the workers stopped, to the next round formed, to its workers started, to their
// first progress. The phases follow one another, so they add up to the whole. Private to the agent.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "workers/attempt.hpp"

namespace ddprun::agent {

struct RestartPhases {
  int restart_count = 0;
  int round = 0;
  std::string cause;  // "failure", "hang" or "interrupted" (another node's event)
  // Seconds; first_progress is unset when the new attempt ended before any progress (then the
  // whole runs to the workers' start).
  double detection = 0;
  double stopping = 0;
  double rendezvous = 0;
  double starting = 0;
  std::optional<double> first_progress;

  double total() const;
  // {"restart_count", "round", "cause", "detection_s", "stopping_s", "rendezvous_s",
  //  "starting_s", "first_progress_s" (null: none), "total_s"}.
  nlohmann::json to_json() const;
};

// The one restart under way on this node: the attempt that ended, the round that formed after it,
// then the new attempt's start and first progress.
class RestartClock {
 public:
  // An attempt ended and another round follows. An attempt without a start or an end (its round
  // ended before its workers started) continues the restart already under way, if any.
  void attempt_ended(const AttemptTimes& times, std::string cause);
  // The next round formed at `now`.
  void round_formed(AttemptTimes::Time now, int round, int restart_count);
  // The new attempt's times, at its first progress or at its end: the restart's phases, once;
  // nullopt when no restart is under way or its round has not formed.
  std::optional<RestartPhases> complete(const AttemptTimes& times);

 private:
  struct Pending {
    AttemptTimes::Time failed, stop_began, stopped;
    std::string cause;
    std::optional<AttemptTimes::Time> formed;
    int round = 0;
    int restart_count = 0;
  };
  std::optional<Pending> pending_;
};

}  // namespace ddprun::agent
