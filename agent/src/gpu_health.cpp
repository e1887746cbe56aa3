#include "ddprun/agent/gpu_health.hpp"

#include <algorithm>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

namespace ddprun::agent {

std::string gpu_health_problem(const std::vector<GpuState>& gpus, size_t expected) {
  std::vector<std::string> problems;
  if (gpus.size() < expected) {
    problems.push_back(
        fmt::format("NVML sees {} of the {} GPUs (/dev/nvidiaN)", gpus.size(), expected));
  }
  for (const GpuState& g : gpus) {
    const std::string name = g.uuid.empty() ? fmt::format("GPU {}", g.index)
                                            : fmt::format("GPU {} ({})", g.index, g.uuid);
    if (!g.lost.empty()) {
      problems.push_back(fmt::format("{} cannot be queried: {}", name, g.lost));
      continue;
    }
    if (g.pages_pending_retirement) {
      problems.push_back(name + " has memory pages pending retirement (it needs a reset)");
    }
    if (g.rows_pending_remap) {
      problems.push_back(name + " has memory rows pending remapping (it needs a reset)");
    }
    if (g.row_remap_failed) problems.push_back(name + " failed to remap a memory row");
    if (g.uncorrectable_errors > 0) {
      problems.push_back(
          fmt::format("{} has had {} uncorrectable ECC errors", name, g.uncorrectable_errors));
    }
  }
  return fmt::format("{}", fmt::join(problems, "; "));
}

std::vector<int> still_on_gpus(const std::vector<GpuState>& gpus, const std::vector<int>& pids) {
  std::vector<int> out;
  for (int pid : pids) {
    const bool held = std::any_of(gpus.begin(), gpus.end(), [pid](const GpuState& g) {
      return std::find(g.compute_pids.begin(), g.compute_pids.end(), pid) != g.compute_pids.end();
    });
    if (held) out.push_back(pid);
  }
  return out;
}

size_t gpu_device_nodes(const std::string& dev) {
  static const std::regex kNode("nvidia[0-9]+");
  std::error_code ec;
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dev, ec)) {
    if (std::regex_match(entry.path().filename().string(), kNode)) ++n;
  }
  return n;
}

}  // namespace ddprun::agent
