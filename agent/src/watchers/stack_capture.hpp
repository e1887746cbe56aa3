#pragma once
// Every rank's stack on a hang, as a part of the worker group. Python workers run with
// PYTHONFAULTHANDLER=1 and get SIGABRT, so that each writes every thread's stack to its stderr;
// native workers are read by gdb, attached to each in turn, bounded in time. Then the group's usual
// stop. Across nodes, each node freezes its workers (SIGSTOP) the moment it declares a hang or
// hears of one, and makes them dump (SIGABRT, then SIGCONT) only once every node has frozen its
// own: a rank that dies first cannot make a rank elsewhere fail out of a collective before its
// stack is taken, since a frozen process handles the pending SIGABRT before it runs again.
// Private to the agent.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "watchers/worker_stacks.hpp"
#include "workers/attempt.hpp"

namespace ddprun::agent {

class Containment;

// How the nodes of a multi-node job dump their stacks together. Each function calls its `then`
// once done (or once its own bound has passed); the capture also goes on by itself after a few
// seconds. Empty functions: a single node, nobody to wait for.
struct HangCoordinator {
  std::function<void(std::function<void()> then)> announce;  // tell the other nodes
  std::function<void(std::function<void()> then)> frozen;    // wait for every node to freeze
};

// Every rank's stack after an attempt, and each rank's innermost frame.
struct AttemptStacks {
  std::string text;
  std::map<int, std::string> frames;
};

class StackCapture {
 public:
  // `containment` runs gdb; `group` is the attempt's owner. Both outlive the capture.
  StackCapture(boost::asio::io_context& io, Containment& containment, AttemptControl& group);

  // Captures Python workers' stacks (`python`) or native ones with `gdb` (a path; "" none), gdb's
  // output going to files in `dump_dir`. Without this call nothing is captured.
  void capture(bool python, std::string gdb, std::string dump_dir);
  // Set for each attempt.
  void coordinate_with(HangCoordinator c) { coordinator_ = std::move(c); }
  // Whether a hang ends with the workers' stacks.
  bool captures() const { return python_ || !gdb_.empty(); }
  // Before the attempt's workers start: the variables that make them dump, and whether a debugger
  // may attach.
  void prepare(Attempt& attempt) const;
  void add_variables(Environment& env) const;
  // Whether a worker's stderr is to be kept (its tail) for its stack.
  bool reads_stderr() const { return python_; }
  // This node declared a hang: the other nodes are told, the workers frozen, their stacks taken,
  // then the stop.
  void on_hang(Attempt& attempt);
  // Another node declared a hang: as on_hang, without telling anyone.
  void on_peer_hang(Attempt& attempt);
  // After the attempt: each worker's stack, by rank.
  AttemptStacks collect(const Attempt& attempt) const;

 private:
  void freeze(const Attempt& attempt) const;
  void freeze_then_dump(Attempt& attempt);
  void dump_then_stop(Attempt& attempt);
  boost::asio::awaitable<void> read_native_stacks(uint64_t attempt);
  // Calls `step` once, with attempt `number` if it is still under way, when the returned function
  // is called or after `limit`.
  std::function<void()> once_in_attempt(uint64_t number, std::function<void(Attempt&)> step,
                                        std::chrono::milliseconds limit);
  Attempt* attempt_numbered(uint64_t number);
  std::optional<WorkerStack> stack_of(const RunningWorker& w) const;

  boost::asio::io_context& io_;
  Containment& containment_;
  AttemptControl& group_;
  boost::asio::steady_timer timer_;
  bool python_ = false;
  std::string gdb_;
  std::string dump_dir_;
  HangCoordinator coordinator_;
};

}  // namespace ddprun::agent
