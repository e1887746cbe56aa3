// NVML through dlopen: the few entry points the GPU health check reads, declared here as NVML's C
// API defines them (nvml.h is not needed to build ddprun).
#include <dlfcn.h>
#include <unistd.h>

#include <array>

#include "ddprun/agent/gpu_health.hpp"

namespace ddprun::agent {
namespace {

using Return = int;  // nvmlReturn_t
using Device = struct NvmlDeviceOpaque*;
constexpr Return kSuccess = 0;
constexpr Return kInsufficientSize = 7;
constexpr int kMemoryErrorUncorrected = 1;  // nvmlMemoryErrorType_t
constexpr int kVolatileEcc = 0;             // nvmlEccCounterType_t

struct ProcessInfo {  // nvmlProcessInfo_t, as the _v2 and _v3 process queries fill it
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t, for drivers with the first query only
  unsigned int pid;
  unsigned long long used_gpu_memory;
};

template <typename F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(::dlsym(lib, name));
}

}  // namespace

struct Nvml::Api {
  void* lib = nullptr;
  Return (*shutdown)() = nullptr;
  const char* (*error_string)(Return) = nullptr;
  Return (*count)(unsigned*) = nullptr;
  Return (*handle)(unsigned, Device*) = nullptr;
  Return (*uuid)(Device, char*, unsigned) = nullptr;
  Return (*pending_pages)(Device, int*) = nullptr;
  Return (*remapped_rows)(Device, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
  Return (*ecc)(Device, int, int, unsigned long long*) = nullptr;
  Return (*processes)(Device, unsigned*, ProcessInfo*) = nullptr;
  Return (*processes_v1)(Device, unsigned*, ProcessInfoV1*) = nullptr;

  std::string error(Return r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return s ? s : "NVML error " + std::to_string(r);
  }
  std::vector<int> pids(Device d) const {
    for (unsigned capacity = 16; capacity <= 4096; capacity *= 4) {
      unsigned n = capacity;
      std::vector<int> out;
      Return r = kSuccess;
      if (processes) {
        std::vector<ProcessInfo> infos(capacity);
        r = processes(d, &n, infos.data());
        for (unsigned i = 0; r == kSuccess && i < n; ++i) out.push_back(int(infos[i].pid));
      } else if (processes_v1) {
        std::vector<ProcessInfoV1> infos(capacity);
        r = processes_v1(d, &n, infos.data());
        for (unsigned i = 0; r == kSuccess && i < n; ++i) out.push_back(int(infos[i].pid));
      }
      if (r != kInsufficientSize) return out;
    }
    return {};
  }
};

std::unique_ptr<Nvml> Nvml::open(const std::string& dev) {
  // Without the driver's control node no process here can reach a GPU, and NVML could not
  // initialise: the library is not even looked for (a search of every library folder).
  if (::access((dev + "/nvidiactl").c_str(), F_OK) != 0) return nullptr;
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return nullptr;
  auto api = std::make_unique<Api>();
  api->lib = lib;
  const auto init = symbol<Return (*)()>(lib, "nvmlInit_v2");
  api->shutdown = symbol<Return (*)()>(lib, "nvmlShutdown");
  api->error_string = symbol<const char* (*)(Return)>(lib, "nvmlErrorString");
  api->count = symbol<Return (*)(unsigned*)>(lib, "nvmlDeviceGetCount_v2");
  api->handle = symbol<Return (*)(unsigned, Device*)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  api->uuid = symbol<Return (*)(Device, char*, unsigned)>(lib, "nvmlDeviceGetUUID");
  api->pending_pages =
      symbol<Return (*)(Device, int*)>(lib, "nvmlDeviceGetRetiredPagesPendingStatus");
  api->remapped_rows = symbol<Return (*)(Device, unsigned*, unsigned*, unsigned*, unsigned*)>(
      lib, "nvmlDeviceGetRemappedRows");
  api->ecc =
      symbol<Return (*)(Device, int, int, unsigned long long*)>(lib, "nvmlDeviceGetTotalEccErrors");
  api->processes = symbol<Return (*)(Device, unsigned*, ProcessInfo*)>(
      lib, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!api->processes) {
    api->processes = symbol<Return (*)(Device, unsigned*, ProcessInfo*)>(
        lib, "nvmlDeviceGetComputeRunningProcesses_v2");
  }
  api->processes_v1 = symbol<Return (*)(Device, unsigned*, ProcessInfoV1*)>(
      lib, "nvmlDeviceGetComputeRunningProcesses");
  if (!init || !api->shutdown || !api->count || !api->handle || init() != kSuccess) {
    ::dlclose(lib);
    return nullptr;
  }
  return std::unique_ptr<Nvml>(new Nvml(std::move(api)));
}

Nvml::Nvml(std::unique_ptr<Api> api) : api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  ::dlclose(api_->lib);
}

std::vector<GpuState> Nvml::read() const {
  std::vector<GpuState> out;
  unsigned n = 0;
  if (api_->count(&n) != kSuccess) return out;
  for (unsigned i = 0; i < n; ++i) {
    GpuState g;
    g.index = i;
    Device d = nullptr;
    if (const Return r = api_->handle(i, &d); r != kSuccess) {
      g.lost = api_->error(r);
      out.push_back(std::move(g));
      continue;
    }
    std::array<char, 96> uuid{};
    if (api_->uuid && api_->uuid(d, uuid.data(), uuid.size()) == kSuccess) g.uuid = uuid.data();
    int pending = 0;
    if (api_->pending_pages && api_->pending_pages(d, &pending) == kSuccess) {
      g.pages_pending_retirement = pending != 0;
    }
    unsigned corrected = 0, uncorrected = 0, is_pending = 0, failed = 0;
    if (api_->remapped_rows &&
        api_->remapped_rows(d, &corrected, &uncorrected, &is_pending, &failed) == kSuccess) {
      g.rows_pending_remap = is_pending != 0;
      g.row_remap_failed = failed != 0;
    }
    unsigned long long errors = 0;  // ECC off or unsupported: not counted
    if (api_->ecc && api_->ecc(d, kMemoryErrorUncorrected, kVolatileEcc, &errors) == kSuccess) {
      g.uncorrectable_errors = errors;
    }
    g.compute_pids = api_->pids(d);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace ddprun::agent
