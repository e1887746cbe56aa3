#pragma once
// The straggler check's eyes on this node's workers (straggler_check.hpp): before an attempt's
// workers start, each gets a step times file (DDPRUN_STEP_TIMES_FILE, step_times_file.hpp); while
// they run, every poll reads each one's totals into the samples the check reads. It finds
// nothing itself. Private to the agent.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "watchers/attempt_watcher.hpp"
#include "watchers/step_times_file.hpp"

namespace ddprun::agent {

// Each local rank's totals as last read, in the attempt under way.
struct StepSamples {
  uint64_t attempt = 0;  // WorkerGroup's attempt number the totals are of
  std::map<int, StepTotals> ranks;
};

class StepWatch : public AttemptWatcher {
 public:
  // Files go in `dir` (it outlives the watch); what is read goes into `samples`.
  StepWatch(std::string dir, std::shared_ptr<StepSamples> samples);

  void prepare(Attempt& attempt) override;
  Finding poll(Attempt& attempt, std::chrono::steady_clock::time_point now, EventLog* log) override;

 private:
  std::string dir_;
  std::shared_ptr<StepSamples> samples_;
  std::map<int, std::unique_ptr<StepTimesFile>> files_;  // by local rank, this attempt's
};

}  // namespace ddprun::agent
