#pragma once
// Hang detection's clock for one worker: when it last made progress, and how long it may go
// without. Progress is a heartbeat, a torch timer set or cleared, or, for a worker that has never
// sent a heartbeat, a line of output. Until its first progress a worker is starting (imports,
// compilation, the process group) and may take kStartTimeout (or the fixed timeout, if longer),
// as NVIDIA's resiliency launcher has an initial timeout of its own.
//
// Silence is counted in time the worker could run: what its main thread spent waiting for a CPU
// (runnable, but the machine busy) since its last progress does not count. A worker slowed by an
// oversubscribed node (or finishing its last step and its teardown there) is not a hung one; a
// worker blocked in a wait, or spinning, is silent all the same.
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
  // The worker's main thread's total time waiting for a CPU so far (a counter that only grows).
  void cpu_wait(std::chrono::nanoseconds total);
  // How long it may go without progress now.
  std::chrono::milliseconds timeout() const;
  // How long it has gone without progress at `now`, less its wait for a CPU meanwhile.
  std::chrono::milliseconds silent(Clock::time_point now) const;
  // Its wait for a CPU since its last progress.
  std::chrono::milliseconds waited_for_cpu() const;
  bool hung(Clock::time_point now) const { return silent(now) > timeout(); }

 private:
  HangPolicy policy_;
  Clock::time_point last_;
  bool any_ = false;  // progress seen: intervals count from the first one
  size_t intervals_ = 0;
  Clock::duration longest_{0};
  std::chrono::nanoseconds cpu_wait_{0};          // the latest reading
  std::chrono::nanoseconds cpu_wait_at_last_{0};  // the reading at the last progress
  bool cpu_wait_read_ = false;
};

}  // namespace ddprun::agent
