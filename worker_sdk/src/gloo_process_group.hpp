#pragma once
// ProcessGroup on Gloo's TCP transport (CPU buffers).
#include <memory>

#include <gloo/context.h>

#include "ddp/process_group.hpp"
#include "op_queue.hpp"

namespace ddp {

class GlooProcessGroup final : public ProcessGroup {
 public:
  // `context` is connected already (full mesh).
  GlooProcessGroup(std::shared_ptr<gloo::Context> context, Ms timeout);

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  Ms timeout() const override { return timeout_; }

  Work all_reduce_async(void* data, size_t count, DType type, ReduceOp op,
                        std::optional<Ms> timeout) override;
  Work broadcast_async(void* data, size_t count, DType type, int root,
                       std::optional<Ms> timeout) override;
  Work all_gather_async(const void* in, void* out, size_t count, DType type,
                        std::optional<Ms> timeout) override;
  Work reduce_scatter_async(const void* in, void* out, size_t count, DType type, ReduceOp op,
                            std::optional<Ms> timeout) override;
  Work barrier_async(std::optional<Ms> timeout) override;

 private:
  // Queues `op`, translating Gloo's exceptions into ddp ones that say what timed out or failed.
  template <class F>
  Work submit(std::string what, F op);
  // In place, on the calling (queue) thread; kAvg reduces as a sum.
  void gloo_all_reduce(void* data, size_t count, DType type, ReduceOp op, uint32_t tag, Ms timeout);

  std::shared_ptr<gloo::Context> context_;
  Ms timeout_;
  uint32_t next_tag_ = 0;  // every rank issues the same sequence, so tags agree
  OpQueue queue_;          // last: its thread stops before the rest is destroyed
};

}  // namespace ddp
