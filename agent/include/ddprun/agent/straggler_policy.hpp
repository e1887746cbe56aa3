#pragma once
// --straggler_threshold, --straggler_steps, --straggler_action: when a node that holds the job's
// steps back while it trains is named, and what the job then does (straggler_check.hpp in the
// agent).
namespace ddprun::agent {

struct StragglerPolicy {
  enum class Action {
    kReport,   // the verdict is said (log, event, metric, `ddprun status`); the job runs on
    kReplace,  // and the node leaves the job: the round re-forms without it (a spare takes its
               // place where one waits), restored from the checkpoints in memory
  };
  // A node is slow when the steps would be this fraction shorter without its lag (0: not
  // watched).
  double threshold = 0.2;
  int steps = 5;  // for this many consecutive steps
  Action action = Action::kReport;

  bool watched() const { return threshold > 0; }
};

}  // namespace ddprun::agent
