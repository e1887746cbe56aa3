#pragma once
// A client's TCP connection, over TLS when given a context, with buffered reads and one deadline
// for all I/O. The deadline is enforced by a watchdog timer that is re-armed only when it fires, so
// an operation costs no timer syscalls.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/store/tls.hpp"

namespace ddprun::store {

class ClientSocket {
 public:
  using Clock = std::chrono::steady_clock;

  // `tls`: null for a clear connection.
  ClientSocket(boost::asio::any_io_executor ex, TlsContext tls);
  ~ClientSocket();

  // Connects, retrying while the host's name does not resolve or the server refuses (either may not
  // be up yet) until `deadline`, and with TLS completes the handshake, checking the server's
  // certificate against `host`. Throws StoreTimeout at the deadline, StoreConnectionError when
  // the host still does not resolve then,
  // StoreClosedEarly when the server ends the connection during the handshake, StoreAuthError when
  // either end refuses the other's certificate or TLS itself (a server without TLS, ddprund's
  // included, answers a protocol_version alert; a refused client certificate may show only on the
  // first read, which then throws it).
  boost::asio::awaitable<void> connect(const std::string& host, uint16_t port,
                                       Clock::time_point deadline);
  // connect(), then `greet` (the client's first request and the reading of its answer). A
  // connection the server ends before answering anything on it (StoreClosedEarly, from either) is
  // made again, backing off, until `deadline`; past it that is a StoreConnectionError saying how
  // many were ended so.
  using Greeting = std::function<boost::asio::awaitable<void>()>;
  boost::asio::awaitable<void> open(const std::string& host, uint16_t port,
                                    Clock::time_point deadline, const Greeting& greet);
  // Every read and write from now on fails with StoreTimeout once `deadline` passes.
  void set_deadline(Clock::time_point deadline);
  // What connect() calls while it goes on trying (ClientOptions::waiting).
  void set_waiting(std::function<void(const std::string&)> report) { waiting_ = std::move(report); }

  boost::asio::awaitable<void> write(const std::string& bytes);
  boost::asio::awaitable<uint8_t> read_u8();
  boost::asio::awaitable<uint32_t> read_u32();
  boost::asio::awaitable<int64_t> read_i64();
  // A `[u64 length][bytes]` value; a length above `max_bytes` is a StoreConnectionError.
  boost::asio::awaitable<std::string> read_bytes(uint64_t max_bytes);

  // A reply the server owes ahead of the next one a caller reads (authentication's, which saves a
  // round trip): `bytes` go out in front of the next write, and the next read first takes
  // `[u8 status]`, then `[u64 length][bytes]` when the status is 0, and hands both to `check`,
  // which throws to refuse them.
  using AheadCheck = std::function<void(uint8_t status, const std::string& value)>;
  void send_ahead(std::string bytes, AheadCheck check);

  void close();
  const std::string& endpoint_name() const { return endpoint_name_; }

 private:
  boost::asio::awaitable<void> fill(size_t need);
  // Reads and checks the reply owed by send_ahead(), if one is.
  boost::asio::awaitable<void> settle();
  template <class T>
  boost::asio::awaitable<T> read_scalar();
  void arm_watchdog();
  boost::asio::awaitable<void> handshake(const std::string& host);
  // Runs `op(stream)` on the TLS stream when there is one, else on the socket: the one place that
  // chooses.
  template <class Op>
  boost::asio::awaitable<std::tuple<boost::system::error_code, size_t>> on_stream(Op op);
  [[noreturn]] void fail(const boost::system::error_code& ec, const char* what);

  boost::asio::ip::tcp::socket socket_;
  TlsContext tls_context_;
  // Over socket_, when tls_context_ is set; a new one per connect. (Kept after close() until then:
  // an operation being cancelled may still use it.)
  std::optional<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;
  boost::asio::steady_timer watchdog_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  Clock::time_point deadline_ = Clock::time_point::max();
  Clock::time_point armed_at_ = Clock::time_point::max();
  uint64_t generation_ = 0;
  bool armed_ = false;
  bool io_pending_ = false;
  bool expired_ = false;
  // Whether anything was read on this connection: a failure before it is StoreClosedEarly.
  bool answered_ = false;
  std::function<void(const std::string&)> waiting_;
  // Says, through waiting_, what connect() waits for (after a second, then every 5 s).
  void report_waiting(Clock::time_point since, const std::string& what);
  Clock::time_point reported_{};
  std::vector<char> rbuf_;
  size_t rpos_ = 0;
  size_t rend_ = 0;
  std::string endpoint_name_;
  std::string ahead_;
  AheadCheck ahead_check_;
};

}  // namespace ddprun::store
