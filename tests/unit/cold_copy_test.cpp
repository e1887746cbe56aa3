// A copy stored past the cache (cold_copy), against memcpy's, at every alignment of both ends.
#include <cstddef>
#include <string>

#include <catch2/catch.hpp>

#include "checkpoint/cold_copy.hpp"

using ddprun::agent::cold_copy;

TEST_CASE(
    "cold copy: every byte arrives, at any alignment and length, and none beside the "
    "destination changes",
    "[checkpoint]") {
  std::string source(3 << 20, '\0');
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<char>(i * 131 + i / 251);
  for (const size_t length : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{63}, size_t{64},
                              size_t{65}, size_t{200}, size_t{4096}, (size_t{1} << 20) + 13}) {
    for (size_t from = 0; from < 32; from += 3) {
      for (size_t to = 0; to < 32; ++to) {
        CAPTURE(length, from, to);
        std::string into(length + 64, '\x5a');
        cold_copy(into.data() + to, source.data() + from, length);
        std::string want(length + 64, '\x5a');
        want.replace(to, length, source, from, length);
        REQUIRE(into == want);
      }
    }
  }
}
