// The GPU health check's judgement, on recorded NVML states; and NVML itself where it is installed
// (the GPU machines scripts/gpu-test.sh runs on), else its absence.
#include <dlfcn.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "ddprun/agent/gpu_health.hpp"

using ddprun::agent::gpu_device_nodes;
using ddprun::agent::gpu_health_problem;
using ddprun::agent::GpuState;
using ddprun::agent::Nvml;
using ddprun::agent::still_on_gpus;

namespace {
GpuState gpu(unsigned index) {
  GpuState g;
  g.index = index;
  g.uuid = "GPU-" + std::to_string(index);
  return g;
}
}  // namespace

TEST_CASE("gpu health: every expected GPU present and clean is fit", "[gpu_health]") {
  CHECK(gpu_health_problem({gpu(0), gpu(1)}, 2).empty());
  CHECK(gpu_health_problem({}, 0).empty());
}

TEST_CASE("gpu health: a GPU NVML does not see is named", "[gpu_health]") {
  CHECK(gpu_health_problem({gpu(0)}, 2) == "NVML sees 1 of the 2 GPUs (/dev/nvidiaN)");
  GpuState lost = gpu(1);
  lost.uuid.clear();
  lost.lost = "GPU is lost";
  CHECK(gpu_health_problem({gpu(0), lost}, 2) == "GPU 1 cannot be queried: GPU is lost");
}

TEST_CASE("gpu health: memory waiting for a reset or failing is unfit", "[gpu_health]") {
  GpuState pages = gpu(0), rows = gpu(1), failed = gpu(2), ecc = gpu(3);
  pages.pages_pending_retirement = true;
  rows.rows_pending_remap = true;
  failed.row_remap_failed = true;
  ecc.uncorrectable_errors = 3;
  CHECK(gpu_health_problem({pages, rows, failed, ecc}, 4) ==
        "GPU 0 (GPU-0) has memory pages pending retirement (it needs a reset); "
        "GPU 1 (GPU-1) has memory rows pending remapping (it needs a reset); "
        "GPU 2 (GPU-2) failed to remap a memory row; "
        "GPU 3 (GPU-3) has had 3 uncorrectable ECC errors");
}

TEST_CASE("gpu health: the ended workers still holding GPU memory are found", "[gpu_health]") {
  GpuState a = gpu(0), b = gpu(1);
  a.compute_pids = {100, 7};
  b.compute_pids = {200};
  CHECK(still_on_gpus({a, b}, {7, 200, 300}) == std::vector<int>{7, 200});
  CHECK(still_on_gpus({a, b}, {300}).empty());
}

TEST_CASE("gpu health: the GPU device nodes are the numbered nvidia nodes", "[gpu_health]") {
  const auto dev = std::filesystem::temp_directory_path() / "ddprun-gpu-health-dev";
  std::filesystem::remove_all(dev);
  std::filesystem::create_directories(dev);
  for (const char* name : {"nvidia0", "nvidia7", "nvidiactl", "nvidia-uvm", "nvidia-caps", "sda"}) {
    std::ofstream(dev / name).put('x');
  }
  CHECK(gpu_device_nodes(dev.string()) == 2);
  CHECK(gpu_device_nodes((dev / "absent").string()) == 0);
  std::filesystem::remove_all(dev);
}

TEST_CASE("gpu health: without the driver's control node NVML is not loaded at all",
          "[gpu_health]") {
  const auto dev = std::filesystem::temp_directory_path() / "ddprun-gpu-health-no-driver";
  std::filesystem::remove_all(dev);
  std::filesystem::create_directories(dev);
  std::ofstream(dev / "nvidia0").put('x');  // a device node, but no nvidiactl beside it
  CHECK(Nvml::open(dev.string()) == nullptr);
  CHECK(::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD) == nullptr);
  std::filesystem::remove_all(dev);
}

TEST_CASE("gpu health: NVML where it is installed and nothing to check where it is not",
          "[gpu_health]") {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  const auto nvml = Nvml::open();
  if (lib == nullptr) {
    CHECK(nvml == nullptr);
    return;
  }
  ::dlclose(lib);
  REQUIRE(nvml != nullptr);
  const auto gpus = nvml->read();
  CHECK(gpus.size() == gpu_device_nodes());
  for (const auto& g : gpus) CHECK(g.uuid.starts_with("GPU-"));
  CHECK(gpu_health_problem(gpus, gpu_device_nodes()).empty());  // the lent GPU is a healthy one
}
