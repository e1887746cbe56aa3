// The NCCL backend on one or more GPUs, run by scripts/gpu-test.sh under ddprun: every collective
// and dtype on device buffers against host-computed values, and GradientSync on device buffers.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ddp/gradient_sync.hpp"
#include "ddp/init.hpp"
#include "ddp/run_main.hpp"

using namespace ddp;

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok && ++failures < 20) std::fprintf(stderr, "MISMATCH: %s\n", what);
}

std::vector<float> to_host(const float* d, size_t n) {
  std::vector<float> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  return h;
}

float* to_device(const std::vector<float>& h) {
  float* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), h.size() * sizeof(float));
  cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  return d;
}

int check(int, char**) {
  auto pg = init_process_group(Backend::kNccl);
  const int rank = pg->rank(), world = pg->size();
  const size_t n = 1001;
  std::vector<float> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<float>(rank + 1 + i % 7);

  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax}) {
    float* d = to_device(mine);
    pg->all_reduce(d, n, DType::kFloat32, op);
    const auto got = to_host(d, n);
    for (size_t i = 0; i < n; ++i) {
      float want = 0, lo = 1e30f, hi = -1e30f;
      for (int r = 0; r < world; ++r) {
        const float v = static_cast<float>(r + 1 + i % 7);
        want += v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (op == ReduceOp::kAvg) want /= world;
      if (op == ReduceOp::kMin) want = lo;
      if (op == ReduceOp::kMax) want = hi;
      expect(std::abs(got[i] - want) < 1e-4f, reduce_op_name(op));
    }
    cudaFree(d);
  }
  float* b = to_device(mine);
  pg->broadcast(b, n, DType::kFloat32, 0);
  expect(to_host(b, n)[5] == static_cast<float>(1 + 5 % 7), "broadcast");
  float* all = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&all), n * world * sizeof(float));
  pg->all_gather(b, all, n, DType::kFloat32);
  expect(to_host(all, n * world)[n * (world - 1) + 3] == static_cast<float>(1 + 3), "all_gather");
  pg->barrier();

  GradientSync sync(*pg);
  float* g = to_device(mine);
  sync.add(g, n, DType::kFloat32);
  sync.mark_ready(0);
  sync.finish();
  const auto avg = to_host(g, n);
  float want = 0;
  for (int r = 0; r < world; ++r) want += static_cast<float>(r + 1);
  expect(std::abs(avg[0] - want / world) < 1e-4f, "GradientSync on device buffers");
  std::printf("rank %d/%d: NCCL backend %s\n", rank, world, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, check); }
