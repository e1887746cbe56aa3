#include "checkpoint/digest_avx2.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ddprun::agent {

void digest_add_avx2(void* state, const char* p, size_t n) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), p, n);
}

}  // namespace ddprun::agent
