#pragma once
// Data-parallel gradient averaging, bucketed like PyTorch DDP so that communication overlaps the
// backward pass.
//
//   ddp::GradientSync sync(*pg);
//   for (auto& p : params) sync.add(p.grad.data(), p.grad.size(), ddp::DType::kFloat32);
//   each step: ... backward computes gradient i ... sync.mark_ready(i); ... sync.finish();
//
// Gradients are grouped into buckets in reverse registration order (backward produces the last
// layers' gradients first): the first bucket holds up to first_bucket_bytes, the others up to
// bucket_bytes, and a bucket never mixes dtypes. A bucket's all-reduce starts as soon as its last
// gradient is marked ready and every earlier bucket has started, so all ranks issue the same
// collectives in the same order whatever order their gradients become ready in. finish() starts
// what is left, waits, and leaves every gradient buffer holding the average over ranks. A gradient
// not marked ready in a step (an unused parameter) contributes zeros, as in DDP.
#include <cstddef>
#include <vector>

#include "ddp/process_group.hpp"

namespace ddp {

struct GradientSyncOptions {
  size_t first_bucket_bytes = 1u << 20;
  size_t bucket_bytes = 25u << 20;
};

class GradientSync {
 public:
  explicit GradientSync(ProcessGroup& group, GradientSyncOptions options = {});
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Registers a gradient buffer (host memory, or device memory with an NCCL group, where the
  // kernels writing it need only be enqueued on the group's compute stream when it is marked ready:
  // see InitOptions::cuda_stream); returns its index for mark_ready(). Every rank must
  // register the same buffers (count and dtype) in the same order, before the first step. The
  // gradient is copied into its bucket when marked ready and back by finish().
  size_t add(void* data, size_t count, DType type);
  // Registers a gradient that lives inside its bucket (DDP's gradient_as_bucket_view): no copies.
  // Its memory is data(index), which exists once the bucket layout is fixed by the first call to
  // data() or mark_ready(); write the gradient there.
  size_t add_in_place(size_t count, DType type);
  void* data(size_t index);
  // Gradient `index` is final for this step. Throws std::logic_error if marked twice in a step.
  void mark_ready(size_t index);
  // Completes the step: every gradient now holds the average over ranks. Rethrows a collective's
  // TimeoutError or CommError. Under ddprun's straggler check, it ends a step of the rank's step
  // times, the time spent in it being the rank's wait for the others.
  void finish();

  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Grad {
    void* data;
    size_t count;
    DType type;
    size_t bucket = 0;
    size_t offset = 0;  // elements into the bucket
    bool in_place = false;
    bool ready = false;
  };
  struct Bucket {
    DType type;
    size_t count = 0;
    std::vector<size_t> grads;
    char* flat = nullptr;  // the group's memory (host or device)
    size_t pending = 0;    // gradients not yet ready this step
    bool launched = false;
    Work work;
  };

  void build_buckets();
  void launch_ready_buckets();
  void launch(Bucket& b);
  ReduceOp reduction() const;

  ProcessGroup& group_;
  GradientSyncOptions options_;
  std::vector<Grad> grads_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
};

}  // namespace ddp
