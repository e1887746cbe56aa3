#include "watchers/step_watch.hpp"

#include <utility>

namespace ddprun::agent {

StepWatch::StepWatch(std::string dir, std::shared_ptr<StepSamples> samples)
    : dir_(std::move(dir)), samples_(std::move(samples)) {}

void StepWatch::prepare(Attempt& a) {
  files_.clear();
  samples_->attempt = a.number;
  samples_->ranks.clear();
  for (RunningWorker& w : a.workers) {
    const int rank = w.launch.id.local_rank;
    auto file = std::make_unique<StepTimesFile>(dir_ + "/steps." + std::to_string(rank));
    w.launch.spawn.env["DDPRUN_STEP_TIMES_FILE"] = file->path();
    files_[rank] = std::move(file);
  }
}

AttemptWatcher::Finding StepWatch::poll(Attempt& a, std::chrono::steady_clock::time_point now,
                                        EventLog* log) {
  (void)now;
  (void)log;
  if (a.number != samples_->attempt) return Finding::kNothing;
  for (const auto& [rank, file] : files_) {
    if (const std::optional<StepTotals> t = file->read()) samples_->ranks[rank] = *t;
  }
  return Finding::kNothing;
}

}  // namespace ddprun::agent
