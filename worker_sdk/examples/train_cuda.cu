// train_cpu's model and data on the GPU: forward/backward in a CUDA kernel, gradients averaged with
// ddp::GradientSync over NCCL (device buffers), rank 0's initial weights broadcast, and a final
// check that every rank holds bit-identical parameters (exit 1 if not).
//
//   ddprun --standalone --nproc_per_node=gpu --no_python ./train_cuda [steps]
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/gradient_sync.hpp"
#include "ddp/init.hpp"
#include "ddp/run_main.hpp"

namespace {

constexpr int kIn = 16, kHidden = 32, kBatch = 64;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// One block of kHidden threads; thread j owns hidden unit j.
__global__ void forward_backward(const float* w1, const float* b1, const float* w2, const float* b2,
                                 const float* x, const float* y, float* gw1, float* gb1, float* gw2,
                                 float* gb2, float* loss) {
  __shared__ float h[kBatch][kHidden];
  __shared__ float dout[kBatch];
  const int j = threadIdx.x;
  for (int n = 0; n < kBatch; ++n) {
    float a = b1[j];
    for (int i = 0; i < kIn; ++i) a += w1[j * kIn + i] * x[n * kIn + i];
    h[n][j] = tanhf(a);
  }
  __syncthreads();
  if (j == 0) {
    float l = 0, g = 0;
    for (int n = 0; n < kBatch; ++n) {
      float out = b2[0];
      for (int k = 0; k < kHidden; ++k) out += w2[k] * h[n][k];
      const float err = out - y[n];
      l += err * err / kBatch;
      dout[n] = 2 * err / kBatch;
      g += dout[n];
    }
    *loss = l;
    gb2[0] = g;
  }
  __syncthreads();
  float gw2j = 0, gb1j = 0;
  for (int i = 0; i < kIn; ++i) gw1[j * kIn + i] = 0;
  for (int n = 0; n < kBatch; ++n) {
    gw2j += dout[n] * h[n][j];
    const float da = dout[n] * w2[j] * (1 - h[n][j] * h[n][j]);
    gb1j += da;
    for (int i = 0; i < kIn; ++i) gw1[j * kIn + i] += da * x[n * kIn + i];
  }
  gw2[j] = gw2j;
  gb1[j] = gb1j;
}

__global__ void sgd(float* p, const float* g, int n, float lr) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] -= lr * g[i];
}

int train(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  auto pg = ddp::init_process_group(ddp::Backend::kNccl);
  const int rank = pg->rank(), world = pg->size();
  const int sizes[4] = {kHidden * kIn, kHidden, kHidden, 1};
  float *params[4], *grads[4], *x, *y, *loss;
  std::mt19937 init_rng(rank * 7919 + 1);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  ddp::GradientSync sync(*pg);
  for (int k = 0; k < 4; ++k) {
    std::vector<float> host(sizes[k]);
    for (float& v : host) v = normal(init_rng);
    check(cudaMalloc(&params[k], sizes[k] * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&grads[k], sizes[k] * sizeof(float)), "cudaMalloc");
    check(cudaMemcpy(params[k], host.data(), sizes[k] * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy");
    pg->broadcast(params[k], sizes[k], ddp::DType::kFloat32, 0);
    sync.add(grads[k], sizes[k], ddp::DType::kFloat32);
  }
  check(cudaMalloc(&x, kBatch * kIn * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&y, kBatch * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&loss, sizeof(float)), "cudaMalloc");

  std::mt19937 data_rng(1000 + rank);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> hx(kBatch * kIn), hy(kBatch);
  float first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    for (int n = 0; n < kBatch; ++n) {
      float t = 0;
      for (int i = 0; i < kIn; ++i) t += std::sin(0.7f * i) * (hx[n * kIn + i] = unit(data_rng));
      hy[n] = std::tanh(t) + 0.05f * unit(data_rng);
    }
    check(cudaMemcpy(x, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy");
    check(cudaMemcpy(y, hy.data(), hy.size() * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy");
    forward_backward<<<1, kHidden>>>(params[0], params[1], params[2], params[3], x, y, grads[0],
                                     grads[1], grads[2], grads[3], loss);
    check(cudaGetLastError(), "forward_backward");
    // No wait for the kernel: the group's copies and all-reduces run after it on the GPU.
    for (int k = 3; k >= 0; --k) sync.mark_ready(k);
    sync.finish();
    for (int k = 0; k < 4; ++k)
      sgd<<<(sizes[k] + 255) / 256, 256>>>(params[k], grads[k], sizes[k], 0.05f);
    check(cudaMemcpy(&last, loss, sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (s == 0) first = last;
    if (rank == 0 && (s % 50 == 0 || s == steps - 1)) std::printf("step %4d  loss %.5f\n", s, last);
  }
  int total = 0;
  for (int k = 0; k < 4; ++k) total += sizes[k];
  float *flat, *all;
  check(cudaMalloc(&flat, total * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&all, total * world * sizeof(float)), "cudaMalloc");
  for (int k = 0, off = 0; k < 4; off += sizes[k++]) {
    check(cudaMemcpy(flat + off, params[k], sizes[k] * sizeof(float), cudaMemcpyDeviceToDevice),
          "cudaMemcpy");
  }
  pg->all_gather(flat, all, total, ddp::DType::kFloat32);
  std::vector<float> host(total * world);
  check(cudaMemcpy(host.data(), all, host.size() * sizeof(float), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  bool identical = true;
  for (int r = 1; r < world; ++r) {
    identical &= std::memcmp(host.data(), host.data() + r * total, total * sizeof(float)) == 0;
  }
  std::printf("rank %d/%d: loss %.4f -> %.4f, parameters %s across ranks\n", rank, world, first,
              last, identical ? "bit-identical" : "DIFFER");
  return identical && last < first ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return ddp::run_main(argc, argv, train); }
