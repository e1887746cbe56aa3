#include "ddprun/agent/console.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace ddprun::agent {

struct Console::State {
  int fd;
  size_t capacity;
  std::mutex m;
  std::condition_variable work;     // the writer: something is queued, or stop
  std::condition_variable drained;  // the owner: the queue is empty
  std::deque<std::string> queue;
  size_t queued_bytes = 0;
  size_t dropped_lines = 0;     // in total
  size_t unreported_lines = 0;  // dropped since the last report
  size_t unreported_bytes = 0;
  bool writing = false;  // the writer holds a chunk outside the queue
  bool stuck = false;    // a flush timed out and nothing was written since
  bool stop = false;

  void run() {
    std::unique_lock lock(m);
    for (;;) {
      work.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stop, and nothing left
      std::string chunk = std::move(queue.front());
      queue.pop_front();
      queued_bytes -= chunk.size();
      writing = true;
      lock.unlock();
      write_all(chunk);
      lock.lock();
      writing = false;
      stuck = false;
      if (queue.empty() && unreported_lines > 0) {
        // The console drains again: say what it missed, once.
        const std::string note = fmt::format(
            "ddprun: {} console line(s) ({} bytes) dropped: the console was not being read (the "
            "log files have them)\n",
            unreported_lines, unreported_bytes);
        unreported_lines = unreported_bytes = 0;
        lock.unlock();
        write_all(note);
        lock.lock();
      }
      if (queue.empty()) drained.notify_all();
    }
  }

  void write_all(const std::string& s) const {
    const char* p = s.data();
    size_t n = s.size();
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;  // a closed console is not the workers' problem
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
};

namespace {
// 4 MiB per console: about a second of a fast terminal; beyond it the console is not keeping up.
constexpr size_t kConsoleBytes = 4 << 20;
constexpr int kConsoleDrainMs = 2000;
std::atomic<bool> g_out_made{false};
std::atomic<bool> g_err_made{false};
}  // namespace

Console& Console::of(int fd) {
  // Each is made on its first use only: a console nobody writes to costs no thread.
  if (fd == STDERR_FILENO) {
    static Console err(STDERR_FILENO, kConsoleBytes, kConsoleDrainMs);
    g_err_made.store(true, std::memory_order_relaxed);
    return err;
  }
  static Console out(STDOUT_FILENO, kConsoleBytes, kConsoleDrainMs);
  g_out_made.store(true, std::memory_order_relaxed);
  return out;
}

void Console::flush_all() {
  if (g_out_made.load(std::memory_order_relaxed)) of(STDOUT_FILENO).flush();
  if (g_err_made.load(std::memory_order_relaxed)) of(STDERR_FILENO).flush();
}

Console::Console(int fd, size_t capacity_bytes, int drain_timeout_ms)
    : state_(std::make_shared<State>()), drain_timeout_ms_(drain_timeout_ms) {
  state_->fd = fd;
  state_->capacity = capacity_bytes;
  std::thread([s = state_] { s->run(); }).detach();
}

void Console::flush() {
  std::unique_lock lock(state_->m);
  const auto done = [&] { return state_->queue.empty() && !state_->writing; };
  // A console that already kept one flush waiting, and has written nothing since, is not waited
  // for again.
  if (state_->stuck) return;
  if (!state_->drained.wait_for(lock, std::chrono::milliseconds(drain_timeout_ms_), done)) {
    state_->stuck = true;
  }
}

Console::~Console() {
  flush();
  std::lock_guard lock(state_->m);
  state_->stop = true;
  state_->work.notify_all();
  // A writer stuck in write() keeps its State; the process ends around it.
}

void Console::write(std::string lines) {
  if (lines.empty()) return;
  std::lock_guard lock(state_->m);
  if (state_->queued_bytes + lines.size() > state_->capacity) {
    const auto n = static_cast<size_t>(std::count(lines.begin(), lines.end(), '\n') +
                                       std::count(lines.begin(), lines.end(), '\r'));
    state_->dropped_lines += std::max<size_t>(n, 1);
    state_->unreported_lines += std::max<size_t>(n, 1);
    state_->unreported_bytes += lines.size();
    return;
  }
  state_->queued_bytes += lines.size();
  state_->queue.push_back(std::move(lines));
  state_->work.notify_one();
}

size_t Console::dropped_lines() const {
  std::lock_guard lock(state_->m);
  return state_->dropped_lines;
}

void ConsoleSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t formatted;
  formatter_->format(msg, formatted);
  Console::of(fd_).write(fmt::to_string(formatted));
}

void ConsoleSink::flush_() { Console::of(fd_).flush(); }

}  // namespace ddprun::agent
