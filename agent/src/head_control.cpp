#include "head_control.hpp"

#include <csignal>

#include <spdlog/spdlog.h>

#include "ddprun/agent/signals.hpp"

namespace ddprun::agent {

namespace asio = boost::asio;

// A head never sends more than a signal name per line; anything longer is not from a head.
constexpr size_t kMaxLine = 64;

HeadControl::HeadControl(asio::io_context& io, int fd, std::function<void(int)> on_signal)
    : channel_(io), on_signal_(std::move(on_signal)) {
  if (fd < 0) {
    closed_ = true;
    return;
  }
  channel_.assign(fd);
  read_more();
}

void HeadControl::close() {
  closed_ = true;
  boost::system::error_code ignored;
  channel_.close(ignored);
}

void HeadControl::read_more() {
  channel_.async_read_some(asio::buffer(chunk_), [this](boost::system::error_code ec, size_t n) {
    if (closed_) return;
    if (ec) {
      closed_ = true;
      spdlog::warn("the head node's connection closed: stopping this node's workers");
      on_signal_(SIGTERM);
      return;
    }
    buffer_.append(chunk_, n);
    for (size_t end; (end = buffer_.find('\n')) != std::string::npos;) {
      const std::string line = buffer_.substr(0, end);
      buffer_.erase(0, end + 1);
      handle_line(line);
    }
    if (buffer_.size() > kMaxLine) {
      spdlog::warn("ignoring {} bytes on the head node's control channel: not a signal name",
                   buffer_.size());
      buffer_.clear();
    }
    read_more();
  });
}

void HeadControl::handle_line(const std::string& line) {
  int signo = 0;
  try {
    const std::vector<int> parsed = parse_signal_list(line);
    if (parsed.size() == 1) signo = parsed.front();
  } catch (const std::invalid_argument&) {
  }
  if (signo == 0) {
    spdlog::warn("ignoring '{}' on the head node's control channel: not a signal name",
                 line.substr(0, kMaxLine));
    return;
  }
  spdlog::warn("the head node received {}: forwarding it to the workers and shutting down",
               signal_name(signo));
  on_signal_(signo);
}

}  // namespace ddprun::agent
