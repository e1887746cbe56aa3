#include "etcd_connection.hpp"

#include <array>

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/store/errors.hpp"

namespace ddprun::rendezvous::etcd {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;

std::string describe(const Endpoint& e) {
  return e.host.find(':') != std::string::npos ? fmt::format("[{}]:{}", e.host, e.port)
                                               : fmt::format("{}:{}", e.host, e.port);
}

Connection::Connection(asio::any_io_executor ex, const std::shared_ptr<asio::ssl::context>& tls) {
  if (tls) {
    tls_.emplace(ex, *tls);
  } else {
    plain_.emplace(ex);
  }
}

asio::awaitable<void> Connection::connect(const Endpoint& e, Clock::time_point deadline) {
  host_ = describe(e);
  asio::ip::tcp::resolver resolver(tcp().get_executor());
  tcp().expires_at(deadline);
  const auto found = co_await resolver.async_resolve(e.host, std::to_string(e.port), use_awaitable);
  co_await tcp().async_connect(found, use_awaitable);
  if (tls_) {
    boost::system::error_code not_an_address;
    asio::ip::make_address(e.host, not_an_address);
    if (not_an_address) {
      SSL_set_tlsext_host_name(tls_->native_handle(), e.host.c_str());  // SNI, for names only
    }
    tls_->set_verify_callback(asio::ssl::host_name_verification(e.host));
    co_await tls_->async_handshake(asio::ssl::stream_base::client, use_awaitable);
  }
}

asio::awaitable<void> Connection::send(const std::string& path, const std::string& body,
                                       Clock::time_point deadline, const std::string& token) {
  http::request<http::string_body> req(http::verb::post, path, 11);
  req.set(http::field::host, host_);
  if (!token.empty()) req.set(http::field::authorization, token);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  tcp().expires_at(deadline);
  // (No co_await inside ?: here: GCC 12 destroys its temporaries twice.)
  if (tls_) {
    co_await http::async_write(*tls_, req, use_awaitable);
  } else {
    co_await http::async_write(*plain_, req, use_awaitable);
  }
}

asio::awaitable<http::response<http::string_body>> Connection::read_response(
    Clock::time_point deadline) {
  http::response<http::string_body> res;
  tcp().expires_at(deadline);
  if (tls_) {
    co_await http::async_read(*tls_, buffer_, res, use_awaitable);
  } else {
    co_await http::async_read(*plain_, buffer_, res, use_awaitable);
  }
  co_return res;
}

asio::awaitable<unsigned> Connection::read_stream_header(Clock::time_point deadline) {
  parser_.emplace();
  parser_->body_limit(boost::none);
  tcp().expires_at(deadline);
  if (tls_) {
    co_await http::async_read_header(*tls_, buffer_, *parser_, use_awaitable);
  } else {
    co_await http::async_read_header(*plain_, buffer_, *parser_, use_awaitable);
  }
  co_return parser_->get().result_int();
}
asio::awaitable<std::string> Connection::read_stream_body() {
  std::array<char, 8192> chunk;
  tcp().expires_never();  // a watch may be silent for as long as the job's keys are
  for (;;) {
    if (parser_->is_done()) throw store::StoreConnectionError("the etcd watch stream ended");
    parser_->get().body().data = chunk.data();
    parser_->get().body().size = chunk.size();
    beast::error_code ec;
    if (tls_) {
      std::tie(ec, std::ignore) =
          co_await http::async_read_some(*tls_, buffer_, *parser_, asio::as_tuple(use_awaitable));
    } else {
      std::tie(ec, std::ignore) =
          co_await http::async_read_some(*plain_, buffer_, *parser_, asio::as_tuple(use_awaitable));
    }
    if (ec == http::error::need_buffer) ec = {};
    if (ec)
      throw store::StoreConnectionError(
          fmt::format("etcd watch stream from {}: {}", host_, ec.message()));
    const size_t got = chunk.size() - parser_->get().body().size;
    if (got > 0) co_return std::string(chunk.data(), got);
  }
}

void Connection::close() {
  beast::error_code ec;
  tcp().socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  tcp().close();
}

beast::tcp_stream& Connection::tcp() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }

}  // namespace ddprun::rendezvous::etcd
