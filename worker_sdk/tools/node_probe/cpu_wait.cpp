#include "cpu_wait.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::node_probe {
namespace {

long long run_delay_ns() {
  std::ifstream in("/proc/self/schedstat");
  long long running = 0, waiting = -1;
  in >> running >> waiting;
  return in ? waiting : -1;
}

// The value of `key` in a cpu.stat file, times `scale`; 0 where the file has none; -1 where the
// file cannot be read.
long long stat_value(const std::string& file, const std::string& key, long long scale) {
  std::ifstream in(file);
  if (!in) return -1;
  std::string name;
  long long value = 0;
  while (in >> name >> value) {
    if (name == key) return value * scale;
  }
  return 0;
}

// Where cgroup v1's cpu controller and cgroup v2 are mounted (/proc/self/mountinfo).
struct Mounts {
  std::string v1_cpu, v2;
};

Mounts cgroup_mounts() {
  Mounts m;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    std::string w;
    while (fields >> w) f.push_back(w);
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 > f.size() || f.size() < 5) continue;
    const std::string& type = f[dash + 1];
    const std::string& options = f.back();
    if (type == "cgroup2" && m.v2.empty()) m.v2 = f[4];
    if (type == "cgroup" && m.v1_cpu.empty() &&
        ("," + options + ",").find(",cpu,") != std::string::npos) {
      m.v1_cpu = f[4];
    }
  }
  return m;
}

// Throttled time of `path` (a cgroup under `mount`) and every cgroup above it; -1 where its own
// cpu.stat cannot be read.
long long throttled_along(const std::string& mount, std::string path, const char* key,
                          long long scale) {
  long long total = 0;
  for (bool own = true;; own = false) {
    const long long value = stat_value(mount + path + "/cpu.stat", key, scale);
    if (value < 0 && own) return -1;
    total += std::max(0LL, value);
    if (path.empty() || path == "/") break;
    const auto slash = path.rfind('/');
    path = slash == std::string::npos || slash == 0 ? std::string() : path.substr(0, slash);
  }
  return total;
}

// The throttled time of every cgroup that can hold this process back; -1 where one of them cannot
// be read (a mount namespace without the cgroup file systems): then no wait is discounted.
long long throttled_ns() {
  static const Mounts mounts = cgroup_mounts();
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  long long total = 0;
  bool v1_cpu_seen = false;
  while (std::getline(in, line)) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = "," + line.substr(first + 1, second - first - 1) + ",";
    const std::string path = line.substr(second + 1);
    long long value = 0;
    if (controllers.find(",cpu,") != std::string::npos) {
      v1_cpu_seen = true;
      value =
          mounts.v1_cpu.empty() ? -1 : throttled_along(mounts.v1_cpu, path, "throttled_time", 1);
    } else if (controllers == ",," && !mounts.v2.empty()) {
      value = throttled_along(mounts.v2, path, "throttled_usec", 1000);
    }
    if (value < 0) return -1;
    total += value;
  }
  if (!v1_cpu_seen && mounts.v2.empty()) return -1;  // no cgroup file system to read at all
  return total;
}

}  // namespace

CpuWait::CpuWait() : run_delay_ns_(run_delay_ns()), throttled_ns_(throttled_ns()) {}

std::chrono::nanoseconds CpuWait::elapsed() const {
  const long long now = run_delay_ns(), throttled_now = throttled_ns();
  if (run_delay_ns_ < 0 || now < 0 || throttled_ns_ < 0 || throttled_now < 0) {
    return std::chrono::nanoseconds(0);
  }
  const long long waited = now - run_delay_ns_;
  const long long throttled = throttled_now - throttled_ns_;
  return std::chrono::nanoseconds(std::max(0LL, waited - throttled));
}

}  // namespace ddp::node_probe
