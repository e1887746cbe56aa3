#pragma once
// Keeps a flood of one kind of warning (hostile or broken clients: 250k bad connections in 20 s)
// from flooding the log: at most `burst` messages per second are written; the rest are counted, and
// the next message written says how many were left out. Single-threaded, like the server.
#include <chrono>
#include <cstddef>
#include <string>

#include <spdlog/spdlog.h>

namespace ddprun::store {

class WarningLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WarningLimiter(size_t burst = 20) : burst_(burst) {}

  void warn(const std::string& message, Clock::time_point now = Clock::now()) {
    if (now - window_start_ >= std::chrono::seconds(1)) {
      window_start_ = now;
      written_in_window_ = 0;
    }
    if (written_in_window_ >= burst_) {
      ++suppressed_;
      return;
    }
    ++written_in_window_;
    if (suppressed_ > 0) {
      spdlog::warn("{} ({} similar warnings left out)", message, suppressed_);
      suppressed_ = 0;
    } else {
      spdlog::warn("{}", message);
    }
  }

 private:
  size_t burst_;
  Clock::time_point window_start_{};
  size_t written_in_window_ = 0;
  size_t suppressed_ = 0;
};

}  // namespace ddprun::store
