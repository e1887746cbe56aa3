#pragma once
// Hang detection's clock for one worker: when it last made progress, and how long it may go
// without. Progress is a heartbeat, a torch timer set or cleared, or, for a worker that has never
// sent a heartbeat, a line of output. Until its first progress a worker is starting (imports,
// compilation, the process group) and may take kStartTimeout (or the fixed timeout, if longer),
// as NVIDIA's resiliency launcher has an initial timeout of its own.
#include <chrono>
#include <cstddef>

namespace ddprun::agent {

// --hang_timeout SECONDS|auto.
struct HangPolicy {
  enum class Mode { kOff, kFixed, kAuto };
  Mode mode = Mode::kOff;
  std::chrono::milliseconds timeout{0};  // kFixed
};

class ProgressClock {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kStartTimeout{300'000};
  // kAuto, as NVIDIA's resiliency launcher learns it: once kAutoWarmup intervals between progress
  // were seen, the largest of them times kAutoFactor, never below kAutoFloor; until then
  // kStartTimeout.
  static constexpr size_t kAutoWarmup = 5;
  static constexpr int kAutoFactor = 5;
  static constexpr std::chrono::milliseconds kAutoFloor{2'000};

  ProgressClock(HangPolicy policy, Clock::time_point start);

  void progress(Clock::time_point now);
  // How long it may go without progress now.
  std::chrono::milliseconds timeout() const;
  // How long it has gone without progress at `now`.
  std::chrono::milliseconds silent(Clock::time_point now) const;
  bool hung(Clock::time_point now) const { return silent(now) > timeout(); }

 private:
  HangPolicy policy_;
  Clock::time_point last_;
  bool any_ = false;  // progress seen: intervals count from the first one
  size_t intervals_ = 0;
  Clock::duration longest_{0};
};

}  // namespace ddprun::agent
