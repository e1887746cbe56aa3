#pragma once
// Hang detection's heartbeat (ddprun --hang_timeout): call once per step, or wherever the program
// makes progress. It adds one to a counter in the worker's heartbeat file, mapped into memory on
// the first call: no system call afterwards, a few nanoseconds. Without hang detection (no
// DDPRUN_HEARTBEAT_FILE in the environment) it does nothing. Safe from any thread.

namespace ddp {

void heartbeat() noexcept;

}  // namespace ddp
