#pragma once
// Time this process spent waiting for a CPU that other processes held: its scheduler run delay
// (/proc/self/schedstat) less what CPU quotas on its cgroups withheld (their cpu.stat throttled
// time, cgroup v1's cpu controller and v2, every level up to the root). The node check does not
// count the first (a passing load from elsewhere on a shared host) and does count the second (a
// quota is the node's own speed).
#include <chrono>

namespace ddp::node_probe {

class CpuWait {
 public:
  CpuWait();  // starts counting
  // Waiting for other processes' CPUs since construction; zero where it cannot be told apart from a
  // quota's (the cgroups' cpu.stat cannot be read).
  std::chrono::nanoseconds elapsed() const;

 private:
  long long run_delay_ns_ = -1;
  long long throttled_ns_ = 0;
};

}  // namespace ddp::node_probe
