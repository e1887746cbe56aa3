#include "gpu_kernel.hpp"

#include <dlfcn.h>

#include <stdexcept>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace ddp::node_probe {
namespace {

constexpr int kSize = 4096;
constexpr int kWarmups = 3;
constexpr int kRuns = 20;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
}

// The three cuBLAS entry points the probe uses, from the first libcublas that loads.
struct Cublas {
  using Create = cublasStatus_t (*)(cublasHandle_t*);
  using Destroy = cublasStatus_t (*)(cublasHandle_t);
  using Sgemm = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                   int, const float*, const float*, int, const float*, int,
                                   const float*, float*, int);
  Create create = nullptr;
  Destroy destroy = nullptr;
  Sgemm sgemm = nullptr;

  Cublas() {
    void* lib = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr)
      throw std::runtime_error("no libcublas to load (" + std::string(::dlerror()) + ")");
    create = reinterpret_cast<Create>(::dlsym(lib, "cublasCreate_v2"));
    destroy = reinterpret_cast<Destroy>(::dlsym(lib, "cublasDestroy_v2"));
    sgemm = reinterpret_cast<Sgemm>(::dlsym(lib, "cublasSgemm_v2"));
    if (create == nullptr || destroy == nullptr || sgemm == nullptr) {
      throw std::runtime_error(
          "libcublas lacks cublasCreate_v2, cublasDestroy_v2 or cublasSgemm_v2");
    }
  }
};

}  // namespace

struct GpuGemm::State {
  Cublas cublas;
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  cublasHandle_t handle = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;

  ~State() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (handle != nullptr) cublas.destroy(handle);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
  }

  void gemm() {
    const float one = 1.0f, zero = 0.0f;
    if (cublas.sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, kSize, kSize, kSize, &one, a, kSize, b,
                     kSize, &zero, c, kSize) != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error("cublasSgemm failed");
    }
  }
};

GpuGemm::GpuGemm(int device) : s_(std::make_unique<State>()) {
  check(cudaSetDevice(device), "cudaSetDevice");
  const size_t bytes = sizeof(float) * kSize * kSize;
  for (float** m : {&s_->a, &s_->b, &s_->c}) {
    check(cudaMalloc(m, bytes), "cudaMalloc");
    check(cudaMemset(*m, 0, bytes), "cudaMemset");
  }
  if (s_->cublas.create(&s_->handle) != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error("cublasCreate failed");
  }
  check(cudaEventCreate(&s_->start), "cudaEventCreate");
  check(cudaEventCreate(&s_->stop), "cudaEventCreate");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

GpuGemm::~GpuGemm() = default;

double GpuGemm::seconds() {
  for (int i = 0; i < kWarmups; ++i) s_->gemm();
  check(cudaEventRecord(s_->start), "cudaEventRecord");
  for (int i = 0; i < kRuns; ++i) s_->gemm();
  check(cudaEventRecord(s_->stop), "cudaEventRecord");
  check(cudaEventSynchronize(s_->stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, s_->start, s_->stop), "cudaEventElapsedTime");
  return ms / 1000.0 / kRuns;
}

}  // namespace ddp::node_probe
