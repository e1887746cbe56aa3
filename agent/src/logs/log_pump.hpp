#pragma once
// Copies a worker's teed stream from its pipe to the log file as it arrives, whole, and to the
// console (console.hpp: never blocking the event loop) as lines with a per-worker prefix
// (console_lines.hpp: '\r' ends a line too, long lines come in pieces, a final unterminated line is
// completed at EOF), and those lines that match --duplicate_*_filters to the attempt's filtered
// file.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "ddprun/agent/console_lines.hpp"

namespace ddprun::agent {

class FilteredLog;

struct CloseFile {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
// A worker's log file, open before the worker starts: a worker whose output could not be kept is
// not started (an open that fails after the fork would leave a worker nobody watches).
using LogFile = std::unique_ptr<std::FILE, CloseFile>;
// `path` made empty and open for writing; null where `path` is empty. Throws std::system_error.
LogFile open_log_file(const std::string& path);

class LogPump : public std::enable_shared_from_this<LogPump> {
 public:
  // Takes ownership of `pipe_fd`. Create with std::make_shared: pending reads hold the pump alive.
  // `file` null: no file; `console_fd` < 0: no console; `duplicate` null: no filtered copy.
  LogPump(boost::asio::io_context& io, int pipe_fd, LogFile file, int console_fd,
          std::string prefix, std::shared_ptr<FilteredLog> duplicate = nullptr);
  LogPump(const LogPump&) = delete;
  LogPump& operator=(const LogPump&) = delete;

  // Called on the io_context whenever output arrives (hang detection's progress).
  void set_on_output(std::function<void()> on_output) { on_output_ = std::move(on_output); }
  // Keeps the last `bytes` of the stream for tail() (a hung Python worker's stack dump).
  void keep_tail(size_t bytes) { tail_limit_ = bytes; }
  const std::string& tail() const { return tail_; }
  // From now on, console lines go to `console_fd` (< 0: none) with `prefix` ("" as written), and
  // those matching go to `duplicate`'s file (null: none): a standby that takes a worker's place.
  // An unterminated line so far is ended first, where it was going.
  void redirect_console(int console_fd, const std::string& prefix,
                        std::shared_ptr<FilteredLog> duplicate);
  // Pumps until EOF, then calls `on_eof` (on the io_context).
  void start(std::function<void()> on_eof);
  // Writes out what has arrived so far (what the pipe holds now, at most its capacity), stops
  // reading and closes the pipe (a writer that outlives its worker must not hold the agent up).
  void finish();

 private:
  void read_more();
  void emit(const char* data, size_t n);
  void complete();

  boost::asio::posix::stream_descriptor pipe_;
  LogFile file_;
  int console_fd_;
  ConsoleLines lines_;
  std::shared_ptr<FilteredLog> duplicate_;
  ConsoleLines duplicate_lines_;
  std::vector<char> buf_;
  bool done_ = false;
  std::function<void()> on_eof_;
  std::function<void()> on_output_;
  size_t tail_limit_ = 0;
  std::string tail_;
};

}  // namespace ddprun::agent
