#include "ddprun/agent/progress_clock.hpp"

#include <algorithm>
#include <utility>

namespace ddprun::agent {

ProgressClock::ProgressClock(HangPolicy policy, Clock::time_point start, Clock::duration learned)
    : policy_(policy), last_(start), counted_(start), slowest_(learned) {}

void ProgressClock::progress(Clock::time_point now) {
  if (!any_) {
    counted_ = now;
  } else if (!ending_ && now - counted_ >= kMinInterval) {  // nothing is learned from an end
    slowest_ = std::max(slowest_, now - counted_);
    ++intervals_;
    counted_ = now;
  }
  any_ = true;
  last_ = now;
  cpu_wait_at_last_ = cpu_wait_;
}

void ProgressClock::ending(Clock::time_point now) {
  if (std::exchange(ending_, true)) return;
  last_ = now;
  cpu_wait_at_last_ = cpu_wait_;
}

void ProgressClock::cpu_wait(std::chrono::nanoseconds total) {
  // What was waited before the first reading is not known to fall after the last progress.
  if (!cpu_wait_read_) cpu_wait_at_last_ = total;
  cpu_wait_read_ = true;
  cpu_wait_ = std::max(cpu_wait_, total);
}

std::chrono::milliseconds ProgressClock::waited_for_cpu() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(cpu_wait_ - cpu_wait_at_last_);
}

std::chrono::milliseconds ProgressClock::timeout() const {
  const auto start = std::max(kStartTimeout, policy_.timeout);
  if (!any_ || ending_) return start;
  if (policy_.mode == HangPolicy::Mode::kFixed) return policy_.timeout;
  if (intervals_ < kAutoWarmup) return kStartTimeout;
  return std::max(kAutoFloor,
                  std::chrono::duration_cast<std::chrono::milliseconds>(slowest_ * kAutoFactor));
}

std::chrono::milliseconds ProgressClock::silent(Clock::time_point now) const {
  const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_);
  return std::max(std::chrono::milliseconds(0), wall - waited_for_cpu());
}

}  // namespace ddprun::agent
