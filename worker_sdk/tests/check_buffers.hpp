#pragma once
// The buffers of the SDK's multi-process checks, in the memory of the backend under test. The same
// check sources build twice: for Gloo (host memory) and, with DDP_CHECK_NCCL, for NCCL (device
// memory on this rank's GPU). Values are prepared and checked in host memory; a DeviceBuffer holds
// what the collective works on.
//
// On the device, upload() is asynchronous on the default stream and deliberately late (a host
// callback sleeps before the copy), and nothing waits for it: the collective or GradientSync call
// that follows must order itself after the caller's stream, as the SDK promises. download() waits.
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ddp/init.hpp"

#ifdef DDP_CHECK_NCCL
#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>
#endif

namespace ddp_check {

#ifdef DDP_CHECK_NCCL
constexpr ddp::Backend kBackend = ddp::Backend::kNccl;
constexpr const char* kBackendName = "nccl";

inline void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

class DeviceBuffer {
 public:
  // Device memory of its own.
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes), owned_(true) {
    cuda(cudaMalloc(&data_, bytes_ ? bytes_ : 1), "cudaMalloc");
    cuda(cudaMallocHost(&staging_, bytes_ ? bytes_ : 1), "cudaMallocHost");
  }
  // Device memory that the SDK owns (GradientSync's in-place gradients).
  DeviceBuffer(void* memory, size_t bytes) : bytes_(bytes), data_(memory), owned_(false) {
    cuda(cudaMallocHost(&staging_, bytes_ ? bytes_ : 1), "cudaMallocHost");
  }
  ~DeviceBuffer() {
    cudaDeviceSynchronize();  // no copy may still use the memory being freed
    if (owned_) cudaFree(data_);
    cudaFreeHost(staging_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }

  void upload(const void* host) {
    if (bytes_ == 0) return;
    cuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");  // staging is free
    std::memcpy(staging_, host, bytes_);
    cuda(cudaLaunchHostFunc(cudaStreamLegacy, late, nullptr), "cudaLaunchHostFunc");
    cuda(cudaMemcpyAsync(data_, staging_, bytes_, cudaMemcpyHostToDevice, cudaStreamLegacy),
         "cudaMemcpyAsync");
  }
  void download(void* host) const {
    if (bytes_) cuda(cudaMemcpy(host, data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }

 private:
  static void late(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

  size_t bytes_;
  void* data_ = nullptr;
  bool owned_;
  void* staging_ = nullptr;
};
#else
constexpr ddp::Backend kBackend = ddp::Backend::kGloo;
constexpr const char* kBackendName = "gloo";

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes), owned_(new char[bytes ? bytes : 1]) {
    data_ = owned_;
  }
  DeviceBuffer(void* memory, size_t bytes) : bytes_(bytes), data_(memory) {}
  ~DeviceBuffer() { delete[] owned_; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  void upload(const void* host) {
    if (bytes_) std::memcpy(data_, host, bytes_);
  }
  void download(void* host) const {
    if (bytes_) std::memcpy(host, data_, bytes_);
  }

 private:
  size_t bytes_;
  char* owned_ = nullptr;
  void* data_;
};
#endif

}  // namespace ddp_check
