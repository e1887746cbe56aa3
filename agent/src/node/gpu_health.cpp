#include "ddprun/agent/gpu_health.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>

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
  std::error_code ec;
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dev, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") &&
        std::all_of(name.begin() + 6, name.end(),
                    [](unsigned char c) { return std::isdigit(c) != 0; })) {
      ++n;
    }
  }
  return n;
}

}  // namespace ddprun::agent
