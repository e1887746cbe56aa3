#pragma once
// A plain blocking TCP connection for sending arbitrary bytes to a server and seeing what it does.
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

namespace ddprun::testing {

class RawConnection {
 public:
  explicit RawConnection(uint16_t port) : socket_(io_) {
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  }
  // Sends everything; false if the server has closed the connection meanwhile.
  bool send(const std::string& bytes) {
    boost::system::error_code ec;
    boost::asio::write(socket_, boost::asio::buffer(bytes), ec);
    return !ec;
  }
  // Reads up to `n` bytes, waiting at most `timeout` for the first.
  std::string read(size_t n, std::chrono::milliseconds timeout) {
    std::string out(n, '\0');
    pollfd p{socket_.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return {};
    const auto got = ::recv(socket_.native_handle(), out.data(), n, 0);
    out.resize(got > 0 ? got : 0);
    return out;
  }
  // True when the server closes (EOF or reset) within `timeout`; replies before that are discarded.
  bool closed_by_server(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{socket_.native_handle(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      if (::recv(socket_.native_handle(), buf, sizeof buf, 0) <= 0) return true;
    }
  }
  void close() {
    boost::system::error_code ec;
    socket_.close(ec);
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
};

inline std::string le64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
inline std::string str(const std::string& s) { return le64(s.size()) + s; }
inline const std::string kModernHello = std::string("\x00\xCE\xF7\x85\x3C", 5);

}  // namespace ddprun::testing
