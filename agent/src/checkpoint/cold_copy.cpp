#include "checkpoint/cold_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace ddprun::agent {

void cold_copy(char* to, const char* from, size_t n) {
#if defined(__x86_64__)
  // Up to the first 64-byte boundary of the destination (a cache line: whole lines are streamed)
  // and the tail through the cache; the rest a line at a time.
  const size_t head = std::min(n, (64 - reinterpret_cast<uintptr_t>(to) % 64) % 64);
  std::memcpy(to, from, head);
  to += head, from += head, n -= head;
  const size_t body = n / 64 * 64;
  for (size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + 48), d);
  }
  std::memcpy(to + body, from + body, n - body);
  _mm_sfence();  // (the streamed stores are weakly ordered: ordered before what follows)
#else
  std::memcpy(to, from, n);
#endif
}

}  // namespace ddprun::agent
