#pragma once
// The wall clock ddprun reports: event logs' times and the store's SERVER_TIME, against which each
// agent measures its clock's offset when it joins (`ddprun timeline` places every node's events
// by it).
#include <cstdint>

namespace ddprun::store {

// Microseconds since the epoch by the system clock, shifted by $DDPRUN_TEST_CLOCK_SKEW_MS (read
// once; a test hook standing in for a node whose clock is off).
int64_t wall_clock_micros();

}  // namespace ddprun::store
