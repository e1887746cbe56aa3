#pragma once
// XXH3's 128-bit update with AVX2 (digest_avx2.cpp, compiled for it on x86-64 only), which
// DigestSum uses where the CPU has AVX2: about twice as fast here as the SSE2 code every x86-64
// CPU runs. XXH3 defines its result bit for bit, so a digest summed by either code is the same,
// and a state may pass from one to the other. Private to the agent.
#include <cstddef>

namespace ddprun::agent {

// XXH3_128bits_update() of xxhash.h on `state` (an XXH3_state_t).
void digest_add_avx2(void* state, const char* p, size_t n);

}  // namespace ddprun::agent
