#include "cpu_kernel.hpp"

#include <chrono>
#include <vector>

namespace ddp::node_probe {

double cpu_gemm_seconds() {
  constexpr int n = 384;
  std::vector<float> a(n * n), b(n * n), c(n * n, 0.0f);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f;
    b[i] = static_cast<float>(i % 5) * 0.5f;
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) {
      const float aik = a[i * n + k];
      for (int j = 0; j < n; ++j) c[i * n + j] += aik * b[k * n + j];
    }
  }
  const auto took = std::chrono::steady_clock::now() - start;
  // The product is used, so that the compiler keeps the work.
  volatile float sink = c[n * n / 2];
  (void)sink;
  return std::chrono::duration<double>(took).count();
}

}  // namespace ddp::node_probe
