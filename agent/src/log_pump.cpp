#include "ddprun/agent/log_pump.hpp"

#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace ddprun::agent {
namespace {

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // a closed console is not the workers' problem
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

LogPump::LogPump(boost::asio::io_context& io, int pipe_fd, const std::string& file_path,
                 int console_fd, std::string prefix)
    : pipe_(io, pipe_fd), console_fd_(console_fd), prefix_(std::move(prefix)), buf_(64 * 1024) {
  if (!file_path.empty()) {
    file_ = std::fopen(file_path.c_str(), "w");
    if (file_ == nullptr) {
      throw std::system_error(errno, std::generic_category(), "open " + file_path);
    }
  }
}

LogPump::~LogPump() {
  if (file_ != nullptr) std::fclose(file_);
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
  if (file_ != nullptr) {
    std::fwrite(data, 1, n, file_);
    std::fflush(file_);
  }
  if (console_fd_ < 0) return;
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') continue;
    out += prefix_;
    out += partial_;
    partial_.clear();
    out.append(data + start, i + 1 - start);
    start = i + 1;
  }
  partial_.append(data + start, n - start);
  write_all(console_fd_, out.data(), out.size());
}

void LogPump::finish() {
  if (done_) return;
  // Whatever is already in the pipe still belongs to the log.
  for (;;) {
    boost::system::error_code ec;
    pipe_.non_blocking(true, ec);
    const size_t n = pipe_.read_some(boost::asio::buffer(buf_), ec);
    if (n > 0) emit(buf_.data(), n);
    if (ec || n == 0) break;
  }
  complete();
}

void LogPump::complete() {
  if (done_) return;
  done_ = true;
  if (console_fd_ >= 0 && !partial_.empty()) {
    const std::string line = prefix_ + partial_ + "\n";
    write_all(console_fd_, line.data(), line.size());
    partial_.clear();
  }
  boost::system::error_code ec;
  pipe_.close(ec);
  if (on_eof_) on_eof_();
}

}  // namespace ddprun::agent
