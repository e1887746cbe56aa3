#pragma once
// The NCCL backend's watchdog, free of CUDA so that its rules are unit-tested anywhere. Operations
// are registered in launch order with a probe that says whether they have finished and a deadline;
// the communicator has a probe for asynchronous errors. poll() settles what it can:
//   - an operation whose probe reports done has its Work completed;
//   - an asynchronous error, or a deadline passed, aborts the communicator (the abort callback runs
//     once) and fails every pending operation — TimeoutError for a deadline, CommError for an error
//     — so that a dead or stuck peer becomes an exception (and a worker exit), never a hang.
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>

#include "ddp/process_group.hpp"

namespace ddp {

class OpWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  using DoneProbe = std::function<bool()>;  // true once the operation has finished
  using ErrorProbe = std::function<std::optional<std::string>()>;  // set on an async error

  OpWatchdog(ErrorProbe comm_error, std::function<void()> abort);

  // Thread-safe. The returned Work completes (or fails) in a later poll().
  Work add(std::string what, Clock::time_point deadline, DoneProbe done);
  // Settles what can be settled now; returns the number of operations still pending.
  size_t poll(Clock::time_point now);
  bool aborted() const;

 private:
  struct Pending {
    std::string what;
    Clock::time_point deadline;
    DoneProbe done;
    std::promise<void> promise;
  };
  void fail_all(const std::string& reason, bool timeout);

  ErrorProbe comm_error_;
  std::function<void()> abort_;
  mutable std::mutex mu_;
  std::deque<Pending> pending_;
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace ddp
