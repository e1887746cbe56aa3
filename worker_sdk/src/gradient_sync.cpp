#include "ddp/gradient_sync.hpp"

#include <chrono>
#include <stdexcept>
#include <string>

#include "step_times.hpp"

namespace ddp {

GradientSync::GradientSync(ProcessGroup& group, GradientSyncOptions options)
    : group_(group), options_(options) {}

GradientSync::~GradientSync() {
  for (Bucket& b : buckets_) {
    if (b.launched) {
      try {
        b.work.wait();  // the collective must not outlive its buffer
      } catch (const std::exception&) {
      }
    }
    group_.release(b.flat);
  }
}

// NCCL averages inside the collective; elsewhere the sum is divided while copying back.
ReduceOp GradientSync::reduction() const {
  return group_.averages_in_collective() ? ReduceOp::kAvg : ReduceOp::kSum;
}

size_t GradientSync::add(void* data, size_t count, DType type) {
  if (!buckets_.empty()) throw std::logic_error("GradientSync::add after the layout was fixed");
  grads_.push_back(Grad{data, count, type});
  return grads_.size() - 1;
}

size_t GradientSync::add_in_place(size_t count, DType type) {
  const size_t index = add(nullptr, count, type);
  grads_[index].in_place = true;
  return index;
}

void* GradientSync::data(size_t index) {
  if (buckets_.empty()) build_buckets();
  return grads_.at(index).data;
}

void GradientSync::build_buckets() {
  size_t cap = options_.first_bucket_bytes;
  for (size_t i = grads_.size(); i-- > 0;) {
    Grad& g = grads_[i];
    const size_t bytes = g.count * dtype_size(g.type);
    const bool fits = !buckets_.empty() && buckets_.back().type == g.type &&
                      buckets_.back().count * dtype_size(g.type) + bytes <= cap;
    if (!fits) {
      if (!buckets_.empty()) cap = options_.bucket_bytes;
      buckets_.emplace_back().type = g.type;
    }
    Bucket& b = buckets_.back();
    g.bucket = buckets_.size() - 1;
    g.offset = b.count;
    b.count += g.count;
    b.grads.push_back(i);
  }
  for (Bucket& b : buckets_) {
    b.flat = static_cast<char*>(group_.allocate(b.count * dtype_size(b.type)));
    b.pending = b.grads.size();
    for (size_t i : b.grads) {
      Grad& g = grads_[i];
      if (g.in_place) g.data = b.flat + g.offset * dtype_size(g.type);
    }
  }
}

void GradientSync::mark_ready(size_t index) {
  if (buckets_.empty()) build_buckets();
  if (index >= grads_.size()) {
    throw std::out_of_range("GradientSync::mark_ready: no gradient " + std::to_string(index));
  }
  Grad& g = grads_[index];
  if (g.ready) {
    throw std::logic_error("GradientSync: gradient " + std::to_string(index) +
                           " marked ready twice in one step");
  }
  g.ready = true;
  Bucket& b = buckets_[g.bucket];
  if (!g.in_place) {
    group_.copy(b.flat + g.offset * dtype_size(g.type), g.data, g.count * dtype_size(g.type));
  }
  if (--b.pending == 0) launch_ready_buckets();
}

void GradientSync::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    launch(buckets_[next_launch_++]);
  }
}

void GradientSync::launch(Bucket& b) {
  for (size_t i : b.grads) {
    const Grad& g = grads_[i];
    if (!g.ready) {  // unused this step: contributes zeros
      group_.zero(b.flat + g.offset * dtype_size(g.type), g.count * dtype_size(g.type));
    }
  }
  // Summed on the communication thread; the division happens while copying back (finish()), off
  // the path of the buckets still in flight.
  b.work = group_.all_reduce_async(b.flat, b.count, b.type, reduction());
  b.launched = true;
}

void GradientSync::finish() {
  const auto began = std::chrono::steady_clock::now();
  if (buckets_.empty()) build_buckets();
  while (next_launch_ < buckets_.size()) launch(buckets_[next_launch_++]);
  const bool divide_here = reduction() == ReduceOp::kSum;
  for (Bucket& b : buckets_) {
    b.work.wait();
    b.launched = false;
    for (size_t i : b.grads) {
      Grad& g = grads_[i];
      if (!g.in_place) {
        group_.copy(g.data, b.flat + g.offset * dtype_size(g.type), g.count * dtype_size(g.type));
      }
      if (divide_here) divide(g.type, g.data, g.count, group_.size());
      g.ready = false;
    }
    b.pending = b.grads.size();
  }
  group_.synchronize();
  next_launch_ = 0;
  step_times::step_ended(std::chrono::steady_clock::now() - began);
}

}  // namespace ddp
