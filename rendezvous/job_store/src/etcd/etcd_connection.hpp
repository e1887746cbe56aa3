#pragma once
// One HTTP/1.1 connection to one etcd member, over TCP or TLS: what the client's calls, its watch
// stream and its leadership probe each hold one of. Every operation ends by its deadline (a
// boost::system::system_error, timed_out, past it).
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "etcd_client.hpp"

namespace ddprun::rendezvous::etcd {

// "host:port", with an IPv6 address in brackets.
std::string describe(const Endpoint& e);

class Connection {
 public:
  // `tls`: null for plain TCP.
  Connection(boost::asio::any_io_executor ex,
             const std::shared_ptr<boost::asio::ssl::context>& tls);

  boost::asio::awaitable<void> connect(const Endpoint& e, Clock::time_point deadline);
  // POSTs `body` (JSON) to `path`, with etcd's auth token when `token` is not empty.
  boost::asio::awaitable<void> send(const std::string& path, const std::string& body,
                                    Clock::time_point deadline, const std::string& token = "");
  boost::asio::awaitable<boost::beast::http::response<boost::beast::http::string_body>>
  read_response(Clock::time_point deadline);
  // For a streamed body: reads the header (returns the status), then hands out the body as it
  // arrives, without a deadline; throws StoreConnectionError when the stream ends or breaks.
  boost::asio::awaitable<unsigned> read_stream_header(Clock::time_point deadline);
  boost::asio::awaitable<std::string> read_stream_body();

  void close();
  // The member, as describe() writes it.
  const std::string& host() const { return host_; }

 private:
  boost::beast::tcp_stream& tcp();

  std::optional<boost::beast::tcp_stream> plain_;
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::response_parser<boost::beast::http::buffer_body>> parser_;
  std::string host_;
};

}  // namespace ddprun::rendezvous::etcd
