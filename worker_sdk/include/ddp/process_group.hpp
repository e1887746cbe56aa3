#pragma once
// A group of worker processes that run collectives together. Every rank must issue the same
// collectives in the same order. Device buffers (NCCL) may still be being written by work enqueued
// on the program's CUDA stream (InitOptions::cuda_stream): the operation runs after it. Once wait()
// returns, the result is in the buffer. Every operation is bounded by the group's timeout (or its
// own): a peer that died or hangs becomes ddp::TimeoutError or ddp::CommError, never a hang.
#include <chrono>
#include <cstddef>
#include <cstring>
#include <future>
#include <optional>

#include "ddp/types.hpp"

namespace ddp {

// A started operation. Its buffers must stay alive and untouched until wait() returns.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_future<void> done) : done_(std::move(done)) {}
  // Blocks until the operation has finished; rethrows its error.
  void wait() const { done_.get(); }
  bool completed() const {
    return done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

 private:
  std::shared_future<void> done_;
};

class ProcessGroup {
 public:
  using Ms = std::chrono::milliseconds;
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Ms timeout() const = 0;

  // In place: every rank's `data` becomes the reduction of all ranks' `data`.
  virtual Work all_reduce_async(void* data, size_t count, DType type, ReduceOp op,
                                std::optional<Ms> timeout = {}) = 0;
  // Every rank's `data` becomes `root`'s.
  virtual Work broadcast_async(void* data, size_t count, DType type, int root,
                               std::optional<Ms> timeout = {}) = 0;
  // `out` (size() * count elements) receives every rank's `in`, in rank order.
  virtual Work all_gather_async(const void* in, void* out, size_t count, DType type,
                                std::optional<Ms> timeout = {}) = 0;
  // `in` holds size() * count elements; `out` (count) receives this rank's chunk of their
  // reduction.
  virtual Work reduce_scatter_async(const void* in, void* out, size_t count, DType type,
                                    ReduceOp op, std::optional<Ms> timeout = {}) = 0;
  virtual Work barrier_async(std::optional<Ms> timeout = {}) = 0;

  void all_reduce(void* data, size_t count, DType type, ReduceOp op, std::optional<Ms> t = {}) {
    all_reduce_async(data, count, type, op, t).wait();
  }
  void broadcast(void* data, size_t count, DType type, int root, std::optional<Ms> t = {}) {
    broadcast_async(data, count, type, root, t).wait();
  }
  void all_gather(const void* in, void* out, size_t count, DType type, std::optional<Ms> t = {}) {
    all_gather_async(in, out, count, type, t).wait();
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType type, ReduceOp op,
                      std::optional<Ms> t = {}) {
    reduce_scatter_async(in, out, count, type, op, t).wait();
  }
  void barrier(std::optional<Ms> t = {}) { barrier_async(t).wait(); }

  // Where this group's buffers live, for GradientSync's buckets: host memory by default; an NCCL
  // group's memory is on its GPU and copied on its stream, and synchronize() waits for those
  // copies.
  virtual void* allocate(size_t bytes) { return ::operator new(bytes); }
  virtual void release(void* p) { ::operator delete(p); }
  virtual void copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  virtual void zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }
  virtual void synchronize() {}
  // True when all_reduce(kAvg) costs no more than kSum (NCCL averages inside the collective).
  virtual bool averages_in_collective() const { return false; }
};

}  // namespace ddp
