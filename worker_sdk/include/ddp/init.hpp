#pragma once
// Joining the job's process group through the launcher's store.
#include <chrono>
#include <memory>
#include <string>

#include "ddp/process_group.hpp"
#include "ddp/worker_env.hpp"

namespace ddp {

enum class Backend { kGloo, kNccl };

struct InitOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // rendezvous, and each operation
  // The address this worker's transport listens on; empty: the local address that routes to
  // MASTER_ADDR (so the right interface is used on multi-homed nodes).
  std::string local_addr;
  std::string group_name = "default";
  // kNccl: the CUDA stream (a cudaStream_t) this program computes on; nullptr: the default stream.
  // Every collective, and every GradientSync copy, runs after the work enqueued there before the
  // call, so a buffer need only be *enqueued* to be written, as with torch's ProcessGroupNCCL.
  // With nullptr this also covers every blocking stream (CUDA's legacy default stream waits for
  // them); a stream created with cudaStreamNonBlocking must be named here or synchronized first.
  void* cuda_stream = nullptr;
};

// Connects to the store at MASTER_ADDR:MASTER_PORT and forms the group with every other rank. Keys
// are scoped by run id and restart attempt, so a restarted group never reads a dead one's keys.
// Throws EnvError, TimeoutError (a rank did not arrive in time) or CommError; kNccl throws
// ddp::Error in a build without CUDA. SIGPIPE is ignored from then on unless the program handles
// it (as Python ignores it): a peer that died makes the next collective throw CommError instead of
// killing this process with the signal. (An ignored SIGPIPE is inherited across exec: a program
// that starts others through system() or posix_spawn restores the default for them, as Python's
// subprocess does.)
std::unique_ptr<ProcessGroup> init_process_group(Backend backend, const InitOptions& options = {});
std::unique_ptr<ProcessGroup> init_process_group(Backend backend, const WorkerEnv& env,
                                                 const InitOptions& options);

}  // namespace ddp
