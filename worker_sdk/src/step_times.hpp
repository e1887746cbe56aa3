#pragma once
// The straggler check's step times (ddprun --straggler_threshold) for a libddp worker: each
// GradientSync::finish() ends a step, and the time spent in it, after the rank's own backward
// pass, is its wait for the others. The totals go into the file DDPRUN_STEP_TIMES_FILE names,
// mapped into memory (four little-endian u64: a sequence count odd while written, the steps,
// their time, their waits, in ns), which the agent reads. Without the variable, nothing happens.
// Private to libddp.
#include <chrono>

namespace ddp::step_times {

// A step ended now, after `waited` of it in the collectives. Thread-compatible (one training
// thread); never throws.
void step_ended(std::chrono::steady_clock::duration waited) noexcept;

}  // namespace ddp::step_times
