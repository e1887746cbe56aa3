#pragma once
// The agent's console (its stdout or its stderr) for the workers' teed output: whole lines in,
// written by a thread of its own, so that a console nobody drains (a stalled terminal, `| less`, a
// slow container log pipe) never blocks the agent's event loop: signals, heartbeats and worker
// exits are still acted on. The queue is bounded: text that does not fit is dropped and counted,
// and a line saying how much was dropped is written once the console drains again. The log files
// are written elsewhere and stay complete.
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/sinks/base_sink.h>

namespace ddprun::agent {

class Console {
 public:
  // The console of `fd` (STDOUT_FILENO or STDERR_FILENO), one per fd for the whole process, made
  // (and its thread started) on the first call for that fd. At exit it waits at most
  // `drain_timeout_ms` for what is queued to be written.
  static Console& of(int fd);
  // flush() of each console made so far (none is made for it).
  static void flush_all();

  Console(int fd, size_t capacity_bytes, int drain_timeout_ms);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // Queues `lines` (whole lines) or, when the queue cannot take them, drops them. Never blocks on
  // the console.
  void write(std::string lines);
  // Waits, at most the drain timeout, until what is queued has been written: before text that must
  // come after it is written some other way.
  void flush();
  // Lines dropped so far.
  size_t dropped_lines() const;

  struct State;  // shared with the writer thread, which may outlive this object (a stuck write)

 private:
  std::shared_ptr<State> state_;
  int drain_timeout_ms_;
};

// spdlog's lines through the console of `fd`, so that the agent's own log lines keep their place
// among the workers' lines and never block the event loop either.
class ConsoleSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ConsoleSink(int fd) : fd_(fd) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;

 private:
  int fd_;
};

}  // namespace ddprun::agent
