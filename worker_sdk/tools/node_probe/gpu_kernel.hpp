#pragma once
// The node check's compute probe on a GPU: a fixed single-precision matrix product with cuBLAS
// (loaded at run time, where the machine has it: CUDA's or torch's libcublas), the same work on
// every node. Only in a build with CUDA.
#include <memory>

namespace ddp::node_probe {

// Products of two 4096x4096 float matrices on one CUDA device. What only sets up (cuBLAS loaded,
// the CUDA context, the matrices) is the constructor's, so that the timing alone can wait for the
// host's turn (host_turn.hpp).
class GpuGemm {
 public:
  // Sets up on CUDA device `device`. Throws std::runtime_error saying why it cannot (no GPU, no
  // cuBLAS, a CUDA error).
  explicit GpuGemm(int device);
  ~GpuGemm();
  GpuGemm(const GpuGemm&) = delete;
  GpuGemm& operator=(const GpuGemm&) = delete;

  // Seconds per product: the mean of 20 after 3 to warm up, timed with CUDA events. Throws
  // std::runtime_error on a CUDA or cuBLAS error.
  double seconds();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace ddp::node_probe
