#include "host_output.hpp"

#include "ddprun/agent/console.hpp"
#include "head_node.hpp"

namespace ddprun::launcher {

namespace asio = boost::asio;

// A summary longer than this is relayed as ordinary lines from there on.
constexpr size_t kMaxSummary = 1 << 20;

HostOutput::HostOutput(asio::io_context& io, int fd, int console_fd, std::string prefix)
    : pipe_(io, fd),
      console_fd_(console_fd),
      prefix_(std::move(prefix)),
      lines_("", 64 * 1024),
      buf_(64 * 1024) {}

void HostOutput::start(std::function<void()> on_eof, std::function<void()> on_ready) {
  on_eof_ = std::move(on_eof);
  on_ready_ = std::move(on_ready);
  read_more();
}

void HostOutput::release() {
  if (released_) return;
  released_ = true;
  if (!held_.empty()) agent::Console::of(console_fd_).write(std::move(held_));
  held_.clear();
}

void HostOutput::read_more() {
  pipe_.async_read_some(asio::buffer(buf_),
                        [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                          if (ec) {
                            self->relay(self->lines_.finish());
                            if (self->in_summary_) self->summaries_.push_back(self->summary_);
                            boost::system::error_code ignored;
                            self->pipe_.close(ignored);
                            if (self->on_eof_) self->on_eof_();
                            return;
                          }
                          self->relay(self->lines_.feed(std::string_view(self->buf_.data(), n)));
                          self->read_more();
                        });
}

void HostOutput::relay(const std::string& lines) {
  std::string out;
  for (size_t pos = 0; pos < lines.size();) {
    const size_t end = std::min(lines.find_first_of("\r\n", pos), lines.size() - 1);
    const std::string_view line(lines.data() + pos, end + 1 - pos);
    pos = end + 1;
    const std::string_view text = line.substr(0, line.size() - 1);
    if (!text.empty()) last_line_ = text;
    if (!in_summary_ && text == kReadyMarker) {
      if (on_ready_) on_ready_();
    } else if (!in_summary_ && text == kSummaryBegin) {
      in_summary_ = true;
      summary_.clear();
    } else if (in_summary_ && text == kSummaryEnd) {
      in_summary_ = false;
      summaries_.push_back(std::move(summary_));
      summary_.clear();
    } else if (in_summary_ && summary_.size() < kMaxSummary) {
      summary_.append(line);
    } else {
      out.append(prefix_).append(line);
    }
  }
  if (out.empty()) return;
  if (released_) {
    agent::Console::of(console_fd_).write(std::move(out));
  } else if (held_.size() < kMaxSummary) {
    held_ += out;
  }
}

}  // namespace ddprun::launcher
