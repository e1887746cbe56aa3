#include "checkpoint/digest_avx2.hpp"

// Only xxhash.h's own code, all of it static under XXH_INLINE_ALL, belongs here: a function of
// external linkage, or an inline one the linker may pick for another file, would bring AVX2 code to
// CPUs without it.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ddprun::agent {

void digest_add_avx2(void* state, const char* p, size_t n) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), p, n);
}

}  // namespace ddprun::agent
