#include "ddprun/store/metrics_server.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "ddprun/store/errors.hpp"

namespace ddprun::store {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct MetricsServer::State {
  explicit State(asio::io_context& io) : acceptor(io) {}
  tcp::acceptor acceptor;
  std::function<std::string()> render;
  bool stopped = false;
};

namespace {

constexpr auto kRequestTimeout = std::chrono::seconds(10);
constexpr size_t kMaxRequest = 16 * 1024;

asio::awaitable<void> serve(std::shared_ptr<MetricsServer::State> state, tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  try {
    beast::flat_buffer buffer;
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxRequest);
    parser.body_limit(kMaxRequest);
    stream.expires_after(kRequestTimeout);
    co_await http::async_read(stream, buffer, parser, asio::use_awaitable);
    const auto& req = parser.get();
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(false);
    res.set(http::field::server, "ddprun");
    const std::string_view target(req.target().data(), req.target().size());
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res.result(http::status::method_not_allowed);
      res.set(http::field::allow, "GET, HEAD");
      res.body() = "only GET /metrics\n";
    } else if (target != "/metrics" && !target.starts_with("/metrics?")) {
      res.result(http::status::not_found);
      res.body() = "only GET /metrics\n";
    } else {
      res.result(http::status::ok);
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      if (!state->stopped) res.body() = state->render();
      if (req.method() == http::verb::head) {
        res.content_length(res.body().size());
        res.body().clear();
      }
    }
    res.prepare_payload();
    stream.expires_after(kRequestTimeout);
    co_await http::async_write(stream, res, asio::use_awaitable);
  } catch (const std::exception&) {
    // A scraper that went away, sent garbage or too much, or took too long: only its
    // connection ends.
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> accept_loop(std::shared_ptr<MetricsServer::State> state) {
  for (;;) {
    auto [ec, socket] = co_await state->acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
    if (state->stopped || ec == asio::error::operation_aborted) co_return;
    if (ec) {
      spdlog::warn("metrics: accept failed: {}", ec.message());
      continue;
    }
    asio::co_spawn(state->acceptor.get_executor(), serve(state, std::move(socket)), asio::detached);
  }
}

}  // namespace

MetricsServer::MetricsServer(asio::io_context& io, const std::string& address, uint16_t port,
                             std::function<std::string()> render)
    : state_(std::make_shared<State>(io)) {
  state_->render = std::move(render);
  boost::system::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(address, ec);
  if (ec) throw StoreError(fmt::format("metrics: '{}' is not an IP address", address));
  tcp::endpoint ep(addr, port);
  state_->acceptor.open(ep.protocol(), ec);
  if (!ec && addr.is_v6() && addr.to_v6().is_unspecified()) {
    state_->acceptor.set_option(asio::ip::v6_only(false), ec);
  }
  if (!ec) state_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) state_->acceptor.bind(ep, ec);
  if (!ec) state_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw StoreError(
        fmt::format("metrics: cannot listen on {}:{}: {}", address, port, ec.message()));
  }
  asio::co_spawn(io, accept_loop(state_), asio::detached);
}

MetricsServer::~MetricsServer() {
  state_->stopped = true;
  boost::system::error_code ignored;
  state_->acceptor.close(ignored);
}

uint16_t MetricsServer::port() const { return state_->acceptor.local_endpoint().port(); }

std::string prometheus_sample(const std::string& name, const std::string& type,
                              const std::string& help, double value, const std::string& labels) {
  std::string out;
  if (!help.empty()) out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  out += fmt::format("{}{} {}\n", name, labels.empty() ? "" : "{" + labels + "}", value);
  return out;
}

}  // namespace ddprun::store
