#include "nccl_process_group.hpp"

#include <cstring>

#include <fmt/format.h>

#include "ddp/errors.hpp"

namespace ddp {
namespace {

using Clock = OpWatchdog::Clock;
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(1);

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CommError(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

// NCCL's error strings are generic ("invalid usage"); its last error says which and why.
std::string nccl_reason(ncclResult_t r, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  if (last == nullptr || *last == '\0') return ncclGetErrorString(r);
  return fmt::format("{}: {}", ncclGetErrorString(r), last);
}

void check_nccl(ncclResult_t r, const char* what, ncclComm_t comm) {
  if (r != ncclSuccess && r != ncclInProgress) {
    throw CommError(fmt::format("{}: {}", what, nccl_reason(r, comm)));
  }
}

}  // namespace

ncclDataType_t to_nccl(DType type) {
  switch (type) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

NcclProcessGroup::NcclProcessGroup(const WorkerEnv& env, ddprun::store::StoreClient& store,
                                   const std::string& prefix, Ms timeout,
                                   cudaStream_t compute_stream)
    : rank_(env.rank),
      size_(env.world_size),
      timeout_(timeout),
      compute_stream_(compute_stream ? compute_stream : cudaStreamLegacy) {
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices == 0) throw CommError("the NCCL backend needs a GPU and this node has none");
  device_ = env.local_rank % devices;
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");

  ncclUniqueId id;
  const std::string key = prefix + "nccl_unique_id";
  if (rank_ == 0) {
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
    store.set(key, std::string_view(reinterpret_cast<const char*>(&id), sizeof id));
  } else {
    const std::string bytes = store.get(key);
    if (bytes.size() != sizeof id) throw CommError("malformed NCCL unique id in the store");
    std::memcpy(&id, bytes.data(), sizeof id);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  check_nccl(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig",
             comm_);
  wait_not_in_progress("NCCL communicator creation", Clock::now() + timeout_);
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&barrier_scratch_), sizeof(int)), "cudaMalloc");

  watchdog_ = std::make_unique<OpWatchdog>(
      [this]() -> std::optional<std::string> {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm_, &async);
        if (async == ncclSuccess || async == ncclInProgress) return std::nullopt;
        return nccl_reason(async, comm_);
      },
      [this] { ncclCommAbort(comm_); });
  watchdog_thread_ = std::thread([this] {
    cudaSetDevice(device_);
    while (!stop_.load()) {
      watchdog_->poll(Clock::now());
      std::this_thread::sleep_for(kWatchdogPeriod);
    }
  });
}

NcclProcessGroup::~NcclProcessGroup() {
  stop_ = true;
  if (watchdog_thread_.joinable()) watchdog_thread_.join();
  if (comm_ != nullptr && !(watchdog_ && watchdog_->aborted())) ncclCommDestroy(comm_);
  if (barrier_scratch_ != nullptr) cudaFree(barrier_scratch_);
  if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclProcessGroup::order_after_compute() {
  check_cuda(cudaEventRecord(compute_done_, compute_stream_), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, compute_done_, 0), "cudaStreamWaitEvent");
}

void NcclProcessGroup::wait_not_in_progress(const std::string& what, Clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      const std::string reason = nccl_reason(state, comm_);
      ncclCommAbort(comm_);
      throw CommError(fmt::format("{} failed: {}", what, reason));
    }
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm_);
      throw TimeoutError(fmt::format("{} timed out (a peer is gone or stuck)", what));
    }
    std::this_thread::sleep_for(kWatchdogPeriod);
  }
}

template <class F>
Work NcclProcessGroup::enqueue(std::string what, std::optional<Ms> timeout, F launch) {
  const auto deadline = Clock::now() + timeout.value_or(timeout_);
  order_after_compute();
  check_nccl(launch(), what.c_str(), comm_);
  wait_not_in_progress(what, deadline);  // a non-blocking communicator may still be enqueuing
  cudaEvent_t done = nullptr;
  check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(done, stream_), "cudaEventRecord");
  auto event = std::shared_ptr<CUevent_st>(done, [](cudaEvent_t e) { cudaEventDestroy(e); });
  return watchdog_->add(std::move(what), deadline,
                        [event] { return cudaEventQuery(event.get()) == cudaSuccess; });
}

Work NcclProcessGroup::all_reduce_async(void* data, size_t count, DType type, ReduceOp op,
                                        std::optional<Ms> timeout) {
  return enqueue(
      fmt::format("all_reduce({}) of {} {}", reduce_op_name(op), count, dtype_name(type)), timeout,
      [&] { return ncclAllReduce(data, data, count, to_nccl(type), to_nccl(op), comm_, stream_); });
}

Work NcclProcessGroup::broadcast_async(void* data, size_t count, DType type, int root,
                                       std::optional<Ms> timeout) {
  return enqueue(
      fmt::format("broadcast of {} {} from rank {}", count, dtype_name(type), root), timeout,
      [&] { return ncclBroadcast(data, data, count, to_nccl(type), root, comm_, stream_); });
}

Work NcclProcessGroup::all_gather_async(const void* in, void* out, size_t count, DType type,
                                        std::optional<Ms> timeout) {
  return enqueue(fmt::format("all_gather of {} {}", count, dtype_name(type)), timeout,
                 [&] { return ncclAllGather(in, out, count, to_nccl(type), comm_, stream_); });
}

Work NcclProcessGroup::reduce_scatter_async(const void* in, void* out, size_t count, DType type,
                                            ReduceOp op, std::optional<Ms> timeout) {
  return enqueue(
      fmt::format("reduce_scatter({}) of {} {}", reduce_op_name(op), count, dtype_name(type)),
      timeout, [&] {
        return ncclReduceScatter(in, out, count, to_nccl(type), to_nccl(op), comm_, stream_);
      });
}

Work NcclProcessGroup::barrier_async(std::optional<Ms> timeout) {
  return enqueue("barrier", timeout, [&] {
    return ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclInt32, ncclSum, comm_, stream_);
  });
}

void* NcclProcessGroup::allocate(size_t bytes) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void NcclProcessGroup::release(void* p) { cudaFree(p); }

void NcclProcessGroup::copy(void* dst, const void* src, size_t bytes) {
  order_after_compute();
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
             "cudaMemcpyAsync");
}

void NcclProcessGroup::zero(void* p, size_t bytes) {
  order_after_compute();
  check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync");
}

void NcclProcessGroup::synchronize() {
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace ddp
