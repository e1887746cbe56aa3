#pragma once
// Hang detection's clock for one worker in one attempt: when it last made progress, and how long
// it may go without. Progress is a heartbeat, a torch timer set or cleared, or, for a worker that
// has never sent a heartbeat, a line of output.
//
// A worker's start (imports, the process group, building and loading the model, a restore) may
// take kStartTimeout (or the fixed timeout, if longer), as NVIDIA's resiliency launcher has an
// initial timeout of its own. A fixed timeout applies from the worker's first progress (what the
// user asked for: a rank that printed once and went silent is hung after it). A learned one (auto)
// applies only once the worker has shown its rhythm in the attempt, not at its first line: output
// before training (a banner, gloo's "connected" lines, a warning) is followed by silence while
// the process group and the model are built. That is kAutoWarmup intervals between progress, each
// counted only where at least kMinInterval long (lines printed together count once); every
// restarted attempt shows its rhythm again. It is the slowest interval
// seen since the worker's first progress (in this attempt or, for the same local rank, an earlier
// one: the slow steps a job has, evaluation or checkpoint steps, are not forgotten at a restart)
// times kAutoFactor, never under kAutoFloor.
//
// A worker whose program has ended (its script returned and its exit handlers ran, so the
// interpreter is tearing itself down) is ending: from then on it has kStartTimeout (or the fixed
// timeout, if longer) again, and nothing it does is learned. The teardown of torch's modules in a
// worker forked from the warm interpreter writes to most of the heap it shares with it: about 1 s
// of copy-on-write faults on a quiet 2-core machine, about 10 s under a suite's load, where the
// fixed timeout would have called a finished worker hung.
//
// Silence is counted in time the node's workers could run: while a worker of the node waited for a
// CPU (runnable, but the machine busy) since this worker's last progress, this worker's silence
// does not grow (its peers in a collective wait on that worker too). A worker slowed by an
// oversubscribed node is not a hung one; a worker blocked in a wait, or spinning, is silent all
// the same.
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
  static constexpr size_t kAutoWarmup = 20;
  static constexpr std::chrono::milliseconds kMinInterval{50};
  static constexpr int kAutoFactor = 5;
  static constexpr std::chrono::milliseconds kAutoFloor{10'000};

  // `learned`: the slowest interval earlier attempts of this worker's local rank saw (auto).
  ProgressClock(HangPolicy policy, Clock::time_point start, Clock::duration learned = {});

  void progress(Clock::time_point now);
  // The worker's program ended at `now` (idempotent).
  void ending(Clock::time_point now);
  bool is_ending() const { return ending_; }
  // The node's workers' total time waiting for a CPU so far (a counter that only grows).
  void cpu_wait(std::chrono::nanoseconds total);
  // How long it may go without progress now.
  std::chrono::milliseconds timeout() const;
  // How long it has gone without progress at `now`, less the node's wait for a CPU meanwhile.
  std::chrono::milliseconds silent(Clock::time_point now) const;
  // The node's wait for a CPU since its last progress.
  std::chrono::milliseconds waited_for_cpu() const;
  bool hung(Clock::time_point now) const { return silent(now) > timeout(); }
  // The slowest interval between progress seen so far, earlier attempts' included.
  Clock::duration slowest() const { return slowest_; }

 private:
  HangPolicy policy_;
  Clock::time_point last_;     // the last progress
  Clock::time_point counted_;  // the last progress that began an interval
  bool any_ = false;           // progress seen: intervals count from the first one
  bool ending_ = false;        // its program ended
  size_t intervals_ = 0;       // in this attempt
  Clock::duration slowest_{0};
  std::chrono::nanoseconds cpu_wait_{0};          // the latest reading
  std::chrono::nanoseconds cpu_wait_at_last_{0};  // the reading at the last progress
  bool cpu_wait_read_ = false;
};

}  // namespace ddprun::agent
