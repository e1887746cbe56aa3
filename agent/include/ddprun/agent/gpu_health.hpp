#pragma once
// The built-in GPU health check, where GPUs exist: what NVML (libnvidia-ml.so.1, loaded at run
// time: no build-time dependency) says of this node's GPUs, judged before the node joins each
// round; and, before a restart, the wait for the GPU memory of the workers that ended to be
// released.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddprun::agent {

// One GPU, as NVML reports it.
struct GpuState {
  unsigned index = 0;
  std::string uuid;
  std::string lost;                       // non-empty: NVML could not query it (its error)
  bool pages_pending_retirement = false;  // retired pages that wait for a reset
  bool rows_pending_remap = false;        // remapped rows that wait for a reset (A100, H100)
  bool row_remap_failed = false;          // a row could not be remapped
  uint64_t uncorrectable_errors = 0;  // volatile uncorrected ECC errors (since the driver loaded)
  std::vector<int> compute_pids;      // processes that hold memory on it
};

// Why this node's GPUs are unfit for a round, or "" when they are fit: fewer GPUs than the
// `expected` device nodes (/dev/nvidiaN), a GPU NVML cannot query, pages or rows pending
// retirement or remapping, a failed remapping, uncorrectable ECC errors.
std::string gpu_health_problem(const std::vector<GpuState>& gpus, size_t expected);

// Those of `pids` that still hold memory on one of `gpus`.
std::vector<int> still_on_gpus(const std::vector<GpuState>& gpus, const std::vector<int>& pids);

// The GPU device nodes of this machine (/dev/nvidia0, /dev/nvidia1, ...) under `dev`.
size_t gpu_device_nodes(const std::string& dev = "/dev");

class Nvml {
 public:
  // NVML, or null where there is nothing to check: no NVIDIA driver (its control node
  // `dev`/nvidiactl is absent, and then libnvidia-ml.so.1 is not loaded at all), or NVML is not
  // installed or does not initialise.
  static std::unique_ptr<Nvml> open(const std::string& dev = "/dev");
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Every GPU NVML counts, as it is now.
  std::vector<GpuState> read() const;

 private:
  struct Api;
  explicit Nvml(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace ddprun::agent
