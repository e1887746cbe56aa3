#pragma once
// ProcessGroup on NCCL (device buffers on this rank's GPU). The communicator is created
// non-blocking so that its creation can be abandoned at the deadline; every collective goes on the
// group's own stream, followed by an event that the watchdog thread polls together with the
// communicator's asynchronous error state and the operation's deadline (see op_watchdog.hpp).
// Before each collective, copy and zero, the group's stream waits for the program's compute stream
// (an event recorded there), so buffers written by enqueued kernels are read after them.
#include <atomic>
#include <memory>
#include <thread>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ddp/process_group.hpp"
#include "ddp/worker_env.hpp"
#include "ddprun/store/store_client.hpp"
#include "op_watchdog.hpp"

namespace ddp {

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Picks device local_rank % device count, exchanges NCCL's unique id through the store under
  // `prefix`, and creates the communicator within `timeout`. `compute_stream` (nullptr: CUDA's
  // legacy default stream) is the stream whose work each operation runs after.
  NcclProcessGroup(const WorkerEnv& env, ddprun::store::StoreClient& store,
                   const std::string& prefix, Ms timeout, cudaStream_t compute_stream);
  ~NcclProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
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

  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  void synchronize() override;
  bool averages_in_collective() const override { return true; }

 private:
  // Enqueues `launch` (an NCCL call) on the stream and hands the operation to the watchdog.
  template <class F>
  Work enqueue(std::string what, std::optional<Ms> timeout, F launch);
  void wait_not_in_progress(const std::string& what, OpWatchdog::Clock::time_point deadline);
  void order_after_compute();

  int rank_;
  int size_;
  int device_ = 0;
  Ms timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_stream_;
  cudaEvent_t compute_done_ = nullptr;
  int* barrier_scratch_ = nullptr;
  std::unique_ptr<OpWatchdog> watchdog_;
  std::atomic<bool> stop_{false};
  std::thread watchdog_thread_;
};

// NCCL's names for ddp's types and reductions.
ncclDataType_t to_nccl(DType type);
ncclRedOp_t to_nccl(ReduceOp op);

}  // namespace ddp
