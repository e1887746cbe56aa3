#pragma once
// The node check's compute probe without a GPU: a fixed single-precision matrix product on one
// core, the same work on every node.
namespace ddp::node_probe {

// Seconds one product of two 384x384 float matrices takes here.
double cpu_gemm_seconds();

}  // namespace ddp::node_probe
