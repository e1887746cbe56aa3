#include "logs/log_pump.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "ddprun/agent/console.hpp"
#include "logs/filtered_log.hpp"

namespace ddprun::agent {
namespace {

// Longer console lines are shown in pieces of this size (the log files keep them whole).
constexpr size_t kMaxConsoleLine = 64 * 1024;

// The console lines of those that `duplicate` (null: none) keeps.
ConsoleLines filtered_lines(const std::string& prefix, const FilteredLog* duplicate) {
  return ConsoleLines(prefix, kMaxConsoleLine, [duplicate](std::string_view line) {
    return duplicate != nullptr && duplicate->matches(line);
  });
}

}  // namespace

LogFile open_log_file(const std::string& path) {
  if (path.empty()) return nullptr;
  LogFile file(std::fopen(path.c_str(), "w"));
  if (file == nullptr) throw std::system_error(errno, std::generic_category(), "open " + path);
  return file;
}

LogPump::LogPump(boost::asio::io_context& io, int pipe_fd, LogFile file, int console_fd,
                 std::string prefix, std::shared_ptr<FilteredLog> duplicate)
    : pipe_(io, pipe_fd),
      file_(std::move(file)),
      console_fd_(console_fd),
      lines_(prefix, kMaxConsoleLine),
      duplicate_(std::move(duplicate)),
      duplicate_lines_(filtered_lines(prefix, duplicate_.get())),
      buf_(64 * 1024) {}

void LogPump::redirect_console(int console_fd, const std::string& prefix,
                               std::shared_ptr<FilteredLog> duplicate) {
  // An unterminated line so far ends where it began.
  if (console_fd_ >= 0) Console::of(console_fd_).write(lines_.finish());
  if (duplicate_) duplicate_->write(duplicate_lines_.finish());
  console_fd_ = console_fd;
  lines_ = ConsoleLines(prefix, kMaxConsoleLine);
  duplicate_ = std::move(duplicate);
  duplicate_lines_ = filtered_lines(prefix, duplicate_.get());
}

void LogPump::start(std::function<void()> on_eof) {
  on_eof_ = std::move(on_eof);
  read_more();
}

void LogPump::read_more() {
  pipe_.async_read_some(boost::asio::buffer(buf_),
                        [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                          if (self->done_) return;
                          if (n > 0) self->emit(self->buf_.data(), n);
                          if (ec) {
                            self->complete();
                            return;
                          }
                          self->read_more();
                        });
}

void LogPump::emit(const char* data, size_t n) {
  if (on_output_) on_output_();
  if (tail_limit_ > 0) {
    tail_.append(data, n);
    if (tail_.size() > tail_limit_) tail_.erase(0, tail_.size() - tail_limit_);
  }
  if (file_ != nullptr) {
    std::fwrite(data, 1, n, file_.get());
    std::fflush(file_.get());
  }
  if (console_fd_ < 0) return;
  Console::of(console_fd_).write(lines_.feed(std::string_view(data, n)));
  if (duplicate_) duplicate_->write(duplicate_lines_.feed(std::string_view(data, n)));
}

void LogPump::finish() {
  if (done_) return;
  // Whatever is already in the pipe still belongs to the log: as much as the pipe holds, no more
  // (a writer that outlives its worker and never stops must not keep the agent reading).
  const int capacity = ::fcntl(pipe_.native_handle(), F_GETPIPE_SZ);
  const size_t most = capacity > 0 ? static_cast<size_t>(capacity) : size_t{1} << 20;
  for (size_t drained = 0; drained < most;) {
    boost::system::error_code ec;
    pipe_.non_blocking(true, ec);
    const size_t n = pipe_.read_some(boost::asio::buffer(buf_), ec);
    if (n > 0) emit(buf_.data(), n);
    if (ec || n == 0) break;
    drained += n;
  }
  complete();
}

void LogPump::complete() {
  if (done_) return;
  done_ = true;
  if (console_fd_ >= 0) Console::of(console_fd_).write(lines_.finish());
  if (duplicate_) duplicate_->write(duplicate_lines_.finish());
  boost::system::error_code ec;
  pipe_.close(ec);
  if (on_eof_) on_eof_();
}

}  // namespace ddprun::agent
