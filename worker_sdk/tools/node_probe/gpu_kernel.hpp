#pragma once
// The node check's compute probe on a GPU: a fixed single-precision matrix product with cuBLAS
// (loaded at run time, where the machine has it: CUDA's or torch's libcublas), the same work on
// every node. Only in a build with CUDA.
#include <string>

namespace ddp::node_probe {

// Seconds per product of two 4096x4096 float matrices on CUDA device `device`: the mean of 20
// after 3 to warm up, timed with CUDA events. Throws std::runtime_error saying why it cannot
// (no GPU, no cuBLAS, a CUDA error).
double gpu_gemm_seconds(int device);

}  // namespace ddp::node_probe
