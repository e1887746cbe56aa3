#pragma once
// One host's stdout or stderr as the head relays it: whole lines (ConsoleLines), each with the
// host's prefix, to the head's console (never blocking the head's loop). The failure summary an
// agent marks with kSummaryBegin/kSummaryEnd is kept aside instead, for the head to print once.
// Until release(), lines are held (bounded), not printed: a host that never became ready (ssh
// refused, no ddprun there) is reported once by the head, with its last line as the reason.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "ddprun/agent/console_lines.hpp"

namespace ddprun::launcher {

class HostOutput : public std::enable_shared_from_this<HostOutput> {
 public:
  // Takes ownership of `fd`. Create with std::make_shared: pending reads hold it alive.
  HostOutput(boost::asio::io_context& io, int fd, int console_fd, std::string prefix);
  // Relays until end of file, then calls `on_eof`. `on_ready` is called when the line
  // kReadyMarker arrives (it is not printed).
  void start(std::function<void()> on_eof, std::function<void()> on_ready = nullptr);
  // Prints what was held and everything from now on.
  void release();
  // The last non-empty line read (held or printed): ssh's reason when the host failed.
  const std::string& last_line() const { return last_line_; }
  // The summaries the host printed, each whole.
  const std::vector<std::string>& summaries() const { return summaries_; }

 private:
  void read_more();
  void relay(const std::string& lines);

  boost::asio::posix::stream_descriptor pipe_;
  int console_fd_;
  std::string prefix_;
  agent::ConsoleLines lines_;
  std::vector<char> buf_;
  std::function<void()> on_eof_;
  std::function<void()> on_ready_;
  bool released_ = false;
  std::string held_;
  std::string last_line_;
  bool in_summary_ = false;
  std::string summary_;
  std::vector<std::string> summaries_;
};

}  // namespace ddprun::launcher
