#pragma once
// A Prometheus histogram of durations in seconds, with fixed buckets from a millisecond to five
// minutes (restart phases span that range: a crash detected at once, a hang after its timeout).
#include <array>
#include <cstdint>
#include <string>

namespace ddprun::agent {

class SecondsHistogram {
 public:
  static constexpr std::array<double, 14> kBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                      0.5,   1,     2.5,  5,     10,   30,  300};
  void observe(double seconds);
  // `name`_bucket{labels,le=...} for each bucket and +Inf, `name`_sum and `name`_count; with
  // `help` non-empty, the family's HELP and TYPE lines first.
  std::string render(const std::string& name, const std::string& help,
                     const std::string& labels) const;

 private:
  std::array<uint64_t, kBuckets.size()> counts_{};  // observations <= each bucket's bound
  uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace ddprun::agent
