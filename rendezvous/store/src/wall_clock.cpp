#include "ddprun/store/wall_clock.hpp"

#include <chrono>
#include <cstdlib>
#include <string>

namespace ddprun::store {

int64_t wall_clock_micros() {
  static const int64_t skew_micros = []() -> int64_t {
    const char* skew = std::getenv("DDPRUN_TEST_CLOCK_SKEW_MS");
    try {
      return skew != nullptr ? std::stoll(skew) * 1000 : 0;
    } catch (const std::exception&) {
      return 0;
    }
  }();
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::microseconds>(now).count() + skew_micros;
}

}  // namespace ddprun::store
