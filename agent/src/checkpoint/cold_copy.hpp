#pragma once
// A copy into memory that is not read again soon (a kept copy, read at a restore seconds or
// minutes later), stored past the CPU's caches where it has stores that do so (x86-64's
// non-temporal stores): the destination is not read in first and the cache keeps what the caller
// reads next. Measured (240 MiB from /dev/shm into a spare's mapped pages, in 512 KiB pieces read
// into a buffer and summed there, docs/performance.md): 0.069-0.079 s of CPU against 0.089-0.098 s
// for the kernel's read straight into the pages. Private to the agent.
#include <cstddef>

namespace ddprun::agent {

// `n` bytes from `from` to `to` (any alignment; the two do not overlap), visible to every later
// store and system call of this thread when it returns.
void cold_copy(char* to, const char* from, size_t n);

}  // namespace ddprun::agent
