#include "logs/seconds_histogram.hpp"

#include <fmt/format.h>

namespace ddprun::agent {

void SecondsHistogram::observe(double seconds) {
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++counts_[i];
  }
  ++count_;
  sum_ += seconds;
}

std::string SecondsHistogram::render(const std::string& name, const std::string& help,
                                     const std::string& labels) const {
  std::string out;
  if (!help.empty()) out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  const std::string prefix = labels.empty() ? "" : labels + ",";
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, prefix, kBuckets[i], counts_[i]);
  }
  out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n", name, prefix, count_);
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces, sum_, name, braces, count_);
  return out;
}

}  // namespace ddprun::agent
