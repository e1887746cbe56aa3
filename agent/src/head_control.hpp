#pragma once
// The control channel of an agent a head node started over ssh (AgentConfig::control_fd): the head
// writes the name of each signal it receives, one per line; the channel's end means the head (or
// its ssh connection) is gone. Either way the agent stops its workers as on a signal, so nothing is
// left running on a host whose head died.
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

namespace ddprun::agent {

class HeadControl {
 public:
  // Takes ownership of `fd` and starts reading it; `fd` < 0: no channel, nothing happens.
  // `on_signal` is called on the io_context with the signal to act on (SIGTERM at end of file).
  HeadControl(boost::asio::io_context& io, int fd, std::function<void(int)> on_signal);
  // Stops reading: the job has ended.
  void close();

 private:
  void read_more();
  void handle_line(const std::string& line);

  boost::asio::posix::stream_descriptor channel_;
  std::function<void(int)> on_signal_;
  std::string buffer_;
  char chunk_[256];
  bool closed_ = false;
};

}  // namespace ddprun::agent
