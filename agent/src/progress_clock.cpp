#include "ddprun/agent/progress_clock.hpp"

#include <algorithm>

namespace ddprun::agent {

ProgressClock::ProgressClock(HangPolicy policy, Clock::time_point start)
    : policy_(policy), last_(start) {}

void ProgressClock::progress(Clock::time_point now) {
  if (any_) {
    longest_ = std::max(longest_, now - last_);
    ++intervals_;
  }
  any_ = true;
  last_ = now;
}

std::chrono::milliseconds ProgressClock::timeout() const {
  if (!any_) return std::max(kStartTimeout, policy_.timeout);
  if (policy_.mode == HangPolicy::Mode::kFixed) return policy_.timeout;
  if (intervals_ < kAutoWarmup) return kStartTimeout;
  return std::max(kAutoFloor,
                  std::chrono::duration_cast<std::chrono::milliseconds>(longest_ * kAutoFactor));
}

std::chrono::milliseconds ProgressClock::silent(Clock::time_point now) const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - last_);
}

}  // namespace ddprun::agent
