#include "client_socket.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <tuple>

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "ddprun/store/errors.hpp"

namespace ddprun::store {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr size_t kReadBuffer = 64 * 1024;

bool from_tls(const boost::system::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() ||
         ec.category() == asio::ssl::error::get_stream_category();
}

// Whether a failure is TLS refusing this client's settings (a certificate, or TLS itself), which
// trying again does not change, rather than a broken connection.
bool refused_by_tls(const boost::system::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() && !tls_hint(ec.message()).empty();
}

// Whether the server ended the connection (rather than the network failing, or TLS refusing).
bool ended_by_server(const boost::system::error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::ssl::error::stream_truncated;
}

// A TLS failure in words, with the setting that usually causes it.
std::string tls_failure(const boost::system::error_code& ec) {
  const std::string hint = tls_hint(ec.message());
  return hint.empty() ? ec.message() : fmt::format("{} ({})", ec.message(), hint);
}

}  // namespace

ClientSocket::ClientSocket(asio::any_io_executor ex, TlsContext tls)
    : socket_(ex), tls_context_(std::move(tls)), watchdog_(ex), rbuf_(kReadBuffer) {}

ClientSocket::~ClientSocket() { *alive_ = false; }

void ClientSocket::close() {
  watchdog_.cancel();  // nothing is pending once closed; an idle io_context can finish
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  rpos_ = rend_ = 0;
}

void ClientSocket::set_deadline(Clock::time_point deadline) {
  deadline_ = deadline;
  expired_ = false;
}

void ClientSocket::arm_watchdog() {
  if (armed_ && armed_at_ <= deadline_) return;
  armed_ = true;
  armed_at_ = deadline_;
  const uint64_t generation = ++generation_;
  watchdog_.expires_at(deadline_);  // an earlier wait, if any, completes as stale
  watchdog_.async_wait([this, alive = alive_, generation](boost::system::error_code) {
    if (!*alive || generation != generation_) return;
    armed_ = false;
    if (!io_pending_) return;
    if (Clock::now() >= deadline_) {
      expired_ = true;
      boost::system::error_code ec;
      socket_.cancel(ec);
    } else {
      arm_watchdog();
    }
  });
}

void ClientSocket::fail(const boost::system::error_code& ec, const char* what) {
  const bool timed_out =
      expired_ || (ec == asio::error::operation_aborted && Clock::now() >= deadline_);
  // A timeout leaves the connection open: whether the stream is still in step is the caller's call.
  if (timed_out) throw StoreTimeout(fmt::format("{} timed out", what));
  close();
  const std::string failure =
      fmt::format("{} on the store connection to {} failed: {}", what, endpoint_name_,
                  from_tls(ec) ? tls_failure(ec) : ec.message());
  if (refused_by_tls(ec)) throw StoreAuthError(failure);  // (a client certificate it refuses)
  if (!answered_ && ended_by_server(ec)) throw StoreClosedEarly(failure);
  throw StoreConnectionError(failure);
}

void ClientSocket::report_waiting(Clock::time_point since, const std::string& what) {
  const auto now = Clock::now();
  if (!waiting_ || now - since < std::chrono::seconds(1)) return;
  if (reported_ >= since && now - reported_ < std::chrono::seconds(5)) return;
  reported_ = now;
  waiting_(fmt::format("waiting: {} ({:.0f} s so far)", what,
                       std::chrono::duration<double>(now - since).count()));
}

asio::awaitable<void> ClientSocket::connect(const std::string& host, uint16_t port,
                                            Clock::time_point deadline) {
  endpoint_name_ = fmt::format("{}:{}", host, port);
  set_deadline(deadline);
  tcp::resolver resolver(socket_.get_executor());
  const auto since = Clock::now();
  tcp::resolver::results_type endpoints;
  {
    asio::steady_timer backoff(socket_.get_executor());
    auto delay = std::chrono::milliseconds(20);
    for (;;) {
      auto [rec, found] = co_await resolver.async_resolve(host, std::to_string(port),
                                                          tcp::resolver::numeric_service,
                                                          asio::as_tuple(asio::use_awaitable));
      if (!rec) {
        endpoints = std::move(found);
        break;
      }
      // A name that does not resolve yet (a pod's, before the pod is up) is waited for, as
      // torchrun does, until the deadline.
      if (Clock::now() + delay >= deadline) {
        throw StoreConnectionError(fmt::format(
            "cannot resolve store host '{}': {} (tried for {:.0f} s)", host, rec.message(),
            std::chrono::duration<double>(Clock::now() - since).count()));
      }
      report_waiting(
          since, fmt::format("the store host '{}' does not resolve yet ({})", host, rec.message()));
      backoff.expires_after(delay);
      co_await backoff.async_wait(asio::use_awaitable);
      delay = std::min(delay * 2, std::chrono::milliseconds(1000));
    }
  }
  asio::steady_timer backoff(socket_.get_executor());
  auto delay = std::chrono::milliseconds(5);
  std::string last_error = "no address";
  for (;;) {
    io_pending_ = true;
    arm_watchdog();
    auto [ec, ep] =
        co_await asio::async_connect(socket_, endpoints, asio::as_tuple(asio::use_awaitable));
    io_pending_ = false;
    if (!ec) break;
    last_error = ec.message();
    if (expired_ || Clock::now() + delay >= deadline) {
      close();
      const std::string what =
          fmt::format("could not connect to the store at {}: {}", endpoint_name_, last_error);
      if (!expired_ && ec == asio::error::connection_refused) throw StoreRefused(what);
      throw StoreTimeout(what);
    }
    report_waiting(since,
                   fmt::format("nothing listens at {} yet ({})", endpoint_name_, last_error));
    backoff.expires_after(delay);
    co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  rpos_ = rend_ = 0;
  answered_ = false;
  if (tls_context_) co_await handshake(host);
}

asio::awaitable<void> ClientSocket::open(const std::string& host, uint16_t port,
                                         Clock::time_point deadline, const Greeting& greet) {
  asio::steady_timer backoff(socket_.get_executor());
  auto delay = std::chrono::milliseconds(10);
  const auto first = Clock::now();
  for (int ended = 1;; ++ended) {
    std::string failure;
    try {
      co_await connect(host, port, deadline);
      co_await greet();
      co_return;
    } catch (const StoreClosedEarly& e) {
      failure = e.what();
    }
    if (Clock::now() + delay >= deadline) {
      throw StoreConnectionError(fmt::format(
          "{} ({} connection{} in {:.1f} s ended by the store before it answered: is it at its "
          "connection limit, not admitting this node's address, or behind a proxy whose backend "
          "is down?)",
          failure, ended, ended == 1 ? "" : "s",
          std::chrono::duration<double>(Clock::now() - first).count()));
    }
    backoff.expires_after(delay);
    co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
}

asio::awaitable<void> ClientSocket::handshake(const std::string& host) {
  tls_.emplace(socket_, *tls_context_);
  boost::system::error_code not_an_address;
  asio::ip::make_address(host, not_an_address);
  if (not_an_address) SSL_set_tlsext_host_name(tls_->native_handle(), host.c_str());  // SNI
  tls_->set_verify_callback(asio::ssl::host_name_verification(host));
  io_pending_ = true;
  arm_watchdog();
  auto [ec] = co_await tls_->async_handshake(asio::ssl::stream_base::client,
                                             asio::as_tuple(asio::use_awaitable));
  io_pending_ = false;
  if (!ec) co_return;
  if (expired_) fail(ec, "the TLS handshake");
  close();
  // (A ddprun store without TLS answers with an alert, so a closed connection is no hint of one.)
  const std::string what = fmt::format("the TLS handshake with the store at {} failed: {}",
                                       endpoint_name_, tls_failure(ec));
  if (refused_by_tls(ec)) throw StoreAuthError(what);
  if (ended_by_server(ec)) throw StoreClosedEarly(what);
  throw StoreConnectionError(what);
}

template <class Op>
asio::awaitable<std::tuple<boost::system::error_code, size_t>> ClientSocket::on_stream(Op op) {
  if (tls_) co_return co_await op(*tls_);
  co_return co_await op(socket_);
}

void ClientSocket::send_ahead(std::string bytes, AheadCheck check) {
  ahead_ = std::move(bytes);
  ahead_check_ = std::move(check);
}

asio::awaitable<void> ClientSocket::settle() {
  if (!ahead_check_) co_return;
  const AheadCheck check = std::move(ahead_check_);
  ahead_check_ = nullptr;
  const uint8_t status = co_await read_u8();
  std::string value;
  if (status == 0) value = co_await read_bytes(1024);
  try {
    check(status, value);
  } catch (...) {
    close();
    throw;
  }
}

asio::awaitable<void> ClientSocket::write(const std::string& bytes) {
  if (!socket_.is_open()) throw StoreConnectionError("the store connection is closed");
  const std::array<asio::const_buffer, 2> both = {asio::buffer(ahead_), asio::buffer(bytes)};
  io_pending_ = true;
  arm_watchdog();
  auto [ec, n] = co_await on_stream([&](auto& stream) {
    return asio::async_write(stream, both, asio::as_tuple(asio::use_awaitable));
  });
  ahead_.clear();
  io_pending_ = false;
  if (ec) fail(ec, "write");
}

asio::awaitable<void> ClientSocket::fill(size_t need) {
  if (rend_ - rpos_ >= need) co_return;
  if (!socket_.is_open()) throw StoreConnectionError("the store connection is closed");
  if (rpos_ > 0) {
    std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rend_ - rpos_);
    rend_ -= rpos_;
    rpos_ = 0;
  }
  while (rend_ < need) {
    io_pending_ = true;
    arm_watchdog();
    const auto space = asio::buffer(rbuf_.data() + rend_, rbuf_.size() - rend_);
    auto [ec, n] = co_await on_stream([&](auto& stream) {
      return stream.async_read_some(space, asio::as_tuple(asio::use_awaitable));
    });
    io_pending_ = false;
    if (ec) fail(ec, "read");
    rend_ += n;
    answered_ = true;
  }
}

asio::awaitable<uint8_t> ClientSocket::read_u8() {
  co_await settle();
  co_await fill(1);
  co_return static_cast<uint8_t>(rbuf_[rpos_++]);
}

template <class T>
asio::awaitable<T> ClientSocket::read_scalar() {
  co_await settle();
  co_await fill(sizeof(T));
  T v;
  std::memcpy(&v, rbuf_.data() + rpos_, sizeof(T));
  rpos_ += sizeof(T);
  co_return v;
}

asio::awaitable<uint32_t> ClientSocket::read_u32() { return read_scalar<uint32_t>(); }

asio::awaitable<int64_t> ClientSocket::read_i64() { return read_scalar<int64_t>(); }

asio::awaitable<std::string> ClientSocket::read_bytes(uint64_t max_bytes) {
  const auto len = static_cast<uint64_t>(co_await read_i64());
  if (len > max_bytes) {
    close();
    throw StoreConnectionError(
        fmt::format("the store at {} sent a value of {} bytes, more than the limit of {}",
                    endpoint_name_, len, max_bytes));
  }
  std::string out;
  const size_t buffered = std::min<uint64_t>(len, rend_ - rpos_);
  out.assign(rbuf_.data() + rpos_, buffered);
  rpos_ += buffered;
  if (buffered < len) {
    // Large values go straight into the result instead of through the read buffer.
    out.resize(len);
    io_pending_ = true;
    arm_watchdog();
    const auto rest = asio::buffer(out.data() + buffered, len - buffered);
    auto [ec, n] = co_await on_stream([&](auto& stream) {
      return asio::async_read(stream, rest, asio::as_tuple(asio::use_awaitable));
    });
    io_pending_ = false;
    if (ec) fail(ec, "read");
  }
  co_return out;
}

}  // namespace ddprun::store
