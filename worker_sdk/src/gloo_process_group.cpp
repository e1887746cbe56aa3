#include "gloo_process_group.hpp"

#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>

#include "ddp/errors.hpp"

namespace ddp {
namespace {

// Gloo's ring all-reduce moves a buffer in segments of at most this many bytes. Its default, 1 MiB,
// costs a third of the bandwidth at 16-256 MiB on loopback TCP (measured with
// scripts/bench/allreduce.sh: 256 MiB in 194 ms with 1 MiB segments, 141 ms with 8 MiB).
constexpr size_t kSegmentBytes = 8u << 20;

// Calls f.template operator()<T>() with T the storage type of `type` (half types as uint16_t: Gloo
// only moves their bytes; ddp's reduction does the arithmetic).
template <class F>
void with_storage_type(DType type, F&& f) {
  switch (type) {
    case DType::kFloat32:
      return f.template operator()<float>();
    case DType::kFloat64:
      return f.template operator()<double>();
    case DType::kFloat16:
    case DType::kBFloat16:
      return f.template operator()<uint16_t>();
    case DType::kInt32:
      return f.template operator()<int32_t>();
    case DType::kInt64:
      return f.template operator()<int64_t>();
  }
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<gloo::Context> context, Ms timeout)
    : context_(std::move(context)), timeout_(timeout) {}

template <class F>
Work GlooProcessGroup::submit(std::string what, F op) {
  return queue_.submit([what = std::move(what), op = std::move(op)] {
    try {
      op();
    } catch (const gloo::IoException& e) {
      const std::string msg = e.what();
      if (msg.find("imed out") != std::string::npos) {
        throw TimeoutError(fmt::format("{} timed out (a peer is gone or stuck): {}", what, msg));
      }
      throw CommError(fmt::format("{} failed: {}", what, msg));
    } catch (const gloo::EnforceNotMet& e) {
      throw CommError(fmt::format("{} failed: {}", what, e.what()));
    } catch (const gloo::Exception& e) {
      throw CommError(fmt::format("{} failed: {}", what, e.what()));
    }
  });
}

void GlooProcessGroup::gloo_all_reduce(void* data, size_t count, DType type, ReduceOp op,
                                       uint32_t tag, Ms timeout) {
  gloo::AllreduceOptions opts(context_);
  with_storage_type(type, [&]<class T>() { opts.setOutput(static_cast<T*>(data), count); });
  opts.setReduceFunction([type, op](void* out, const void* a, const void* b, size_t n) {
    reduce_into(type, op, out, a, b, n);
  });
  opts.setMaxSegmentSize(kSegmentBytes);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

Work GlooProcessGroup::all_reduce_async(void* data, size_t count, DType type, ReduceOp op,
                                        std::optional<Ms> timeout) {
  const uint32_t tag = next_tag_++;
  const Ms t = timeout.value_or(timeout_);
  const int world = size();
  return submit(fmt::format("all_reduce({}) of {} {}", reduce_op_name(op), count, dtype_name(type)),
                [this, data, count, type, op, t, tag, world] {
                  if (count == 0) return;
                  if (world > 1) gloo_all_reduce(data, count, type, op, tag, t);
                  if (op == ReduceOp::kAvg) divide(type, data, count, world);
                });
}

Work GlooProcessGroup::broadcast_async(void* data, size_t count, DType type, int root,
                                       std::optional<Ms> timeout) {
  if (root < 0 || root >= size()) {
    throw std::invalid_argument(fmt::format("broadcast root {} outside [0, {})", root, size()));
  }
  const uint32_t tag = next_tag_++;
  const Ms t = timeout.value_or(timeout_);
  return submit(fmt::format("broadcast of {} {} from rank {}", count, dtype_name(type), root),
                [this, data, count, type, root, t, tag] {
                  if (count == 0 || size() == 1) return;
                  gloo::BroadcastOptions opts(context_);
                  with_storage_type(
                      type, [&]<class T>() { opts.setOutput(static_cast<T*>(data), count); });
                  opts.setRoot(root);
                  opts.setTag(tag);
                  opts.setTimeout(t);
                  gloo::broadcast(opts);
                });
}

Work GlooProcessGroup::all_gather_async(const void* in, void* out, size_t count, DType type,
                                        std::optional<Ms> timeout) {
  const uint32_t tag = next_tag_++;
  const Ms t = timeout.value_or(timeout_);
  return submit(fmt::format("all_gather of {} {}", count, dtype_name(type)),
                [this, in, out, count, type, t, tag] {
                  if (count == 0) return;
                  if (size() == 1) {
                    std::memmove(out, in, count * dtype_size(type));
                    return;
                  }
                  gloo::AllgatherOptions opts(context_);
                  with_storage_type(type, [&]<class T>() {
                    opts.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
                    opts.setOutput(static_cast<T*>(out), count * size());
                  });
                  opts.setTag(tag);
                  opts.setTimeout(t);
                  gloo::allgather(opts);
                });
}

Work GlooProcessGroup::reduce_scatter_async(const void* in, void* out, size_t count, DType type,
                                            ReduceOp op, std::optional<Ms> timeout) {
  // Gloo has no stable reduce-scatter API in this version: reduce everything, keep our chunk.
  const uint32_t tag = next_tag_++;
  const Ms t = timeout.value_or(timeout_);
  const int world = size();
  return submit(
      fmt::format("reduce_scatter({}) of {} {}", reduce_op_name(op), count, dtype_name(type)),
      [this, in, out, count, type, op, t, tag, world] {
        if (count == 0) return;
        const size_t elem = dtype_size(type);
        std::vector<char> all(static_cast<const char*>(in),
                              static_cast<const char*>(in) + count * world * elem);
        if (world > 1) gloo_all_reduce(all.data(), count * world, type, op, tag, t);
        std::memcpy(out, all.data() + rank() * count * elem, count * elem);
        if (op == ReduceOp::kAvg) divide(type, out, count, world);
      });
}

Work GlooProcessGroup::barrier_async(std::optional<Ms> timeout) {
  const uint32_t tag = next_tag_++;
  const Ms t = timeout.value_or(timeout_);
  return submit("barrier", [this, t, tag] {
    if (size() == 1) return;
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(t);
    gloo::barrier(opts);
  });
}

}  // namespace ddp
