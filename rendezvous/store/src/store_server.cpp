#include "ddprun/store/store_server.hpp"

#include <algorithm>
#include <fstream>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/store/errors.hpp"
#include "server_state.hpp"
#include "store_connection.hpp"

namespace ddprun::store {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// The kernel's cap on any listen backlog in this network namespace (net.core.somaxconn).
int somaxconn() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int v = 0;
  return in >> v ? v : 4096;
}

void open_and_bind(tcp::acceptor& acceptor, const tcp::endpoint& ep, int backlog) {
  acceptor.open(ep.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  if (ep.protocol() == tcp::v6()) acceptor.set_option(asio::ip::v6_only(false));
  acceptor.bind(ep);
  acceptor.listen(backlog);
}

void bind_listener(tcp::acceptor& acceptor, const ServerOptions& o) {
  const int backlog = static_cast<int>(std::min<size_t>(o.listen_backlog, 1 << 20));
  if (o.expected_clients > 0 && static_cast<int>(o.expected_clients) > somaxconn()) {
    spdlog::info(
        "store: {} clients may connect at once, but net.core.somaxconn={} caps the listen backlog: "
        "connections beyond it at once wait for SYN retries (sysctl -w net.core.somaxconn={})",
        o.expected_clients, somaxconn(), std::min<size_t>(o.expected_clients, 1 << 20));
  }
  if (o.host.empty()) {
    try {
      open_and_bind(acceptor, tcp::endpoint(tcp::v6(), o.port), backlog);
      return;
    } catch (const boost::system::system_error&) {
      if (acceptor.is_open()) acceptor.close();
    }
    open_and_bind(acceptor, tcp::endpoint(tcp::v4(), o.port), backlog);
    return;
  }
  tcp::resolver resolver(acceptor.get_executor());
  auto results = resolver.resolve(o.host, std::to_string(o.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service);
  boost::system::system_error last(asio::error::host_not_found);
  for (const auto& r : results) {
    try {
      open_and_bind(acceptor, r.endpoint(), backlog);
      return;
    } catch (const boost::system::system_error& e) {
      if (acceptor.is_open()) acceptor.close();
      last = e;
    }
  }
  throw last;
}

// Kernel keep-alive reaps peers whose host vanished without closing (half-open connections): probes
// after 60 s of silence, every 10 s, 6 unanswered close the connection, instead of Linux's default
// two hours. (KEEPALIVE, the protocol extension, is the fast path for agents.)
void enable_keepalive_probes(tcp::socket& socket) {
  const int fd = socket.native_handle();
  const int on = 1, idle = 60, interval = 10, count = 6;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// An IPv4 peer of a dual-stack listener as IPv4.
asio::ip::address unmapped(const asio::ip::address& a) {
  if (!a.is_v6() || !a.to_v6().is_v4_mapped()) return a;
  return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
}

// Whether `peer` may use a store whose ServerOptions::allowed_peers is `allowed`.
bool admitted(const asio::ip::address& peer, const std::vector<asio::ip::address>& allowed) {
  return allowed.empty() || peer.is_loopback() ||
         std::find(allowed.begin(), allowed.end(), peer) != allowed.end();
}

asio::awaitable<void> accept_loop(std::shared_ptr<StoreServer::State> state) {
  asio::steady_timer backoff(state->acceptor.get_executor());
  for (;;) {
    auto [ec, socket] = co_await state->acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
    if (state->stopped) co_return;
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      // Out of descriptors or a transient error: back off briefly instead of spinning.
      spdlog::warn("store: accept failed: {}", ec.message());
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    if (state->connections.size() >= state->options.max_connections) {
      boost::system::error_code ignored;
      auto ep = socket.remote_endpoint(ignored);
      state->connection_warnings.warn(
          fmt::format("store: refusing connection from {}:{}: {} connections are open (the limit)",
                      ep.address().to_string(), ep.port(), state->connections.size()));
      socket.close(ignored);
      ++state->counters.connections_refused;
      continue;
    }
    boost::system::error_code peer_ec;
    const auto peer = socket.remote_endpoint(peer_ec);
    const asio::ip::address from = unmapped(peer.address());
    if (peer_ec || !admitted(from, state->options.allowed_peers)) {
      state->connection_warnings.warn(
          fmt::format("store: refusing connection from {}: not an address of this store's nodes",
                      peer_ec ? std::string("an unknown peer") : from.to_string()));
      boost::system::error_code ignored;
      socket.close(ignored);
      ++state->counters.connections_refused;
      continue;
    }
    ++state->counters.connections_accepted;
    boost::system::error_code opt_ec;
    socket.set_option(tcp::no_delay(true), opt_ec);
    enable_keepalive_probes(socket);
    std::make_shared<StoreConnection>(state, std::move(socket))->start();
  }
}

}  // namespace

StoreServer::StoreServer(asio::io_context& io, ServerOptions options)
    : state_(std::make_shared<State>(io, std::move(options))) {
  try {
    bind_listener(state_->acceptor, state_->options);
  } catch (const boost::system::system_error& e) {
    throw StoreError(fmt::format("cannot listen on {}:{}: {}",
                                 state_->options.host.empty() ? "*" : state_->options.host,
                                 state_->options.port, e.code().message()));
  }
  state_->port = state_->acceptor.local_endpoint().port();
  asio::co_spawn(io, accept_loop(state_), asio::detached);
}

StoreServer::~StoreServer() { stop(); }

uint16_t StoreServer::port() const { return state_->port; }

void StoreServer::stop() {
  if (state_->stopped) return;
  state_->stopped = true;
  boost::system::error_code ec;
  state_->acceptor.close(ec);
  std::vector<StoreConnection*> open(state_->connections.begin(), state_->connections.end());
  for (StoreConnection* c : open) c->close("");
}

size_t StoreServer::connection_count() const { return state_->connections.size(); }

size_t StoreServer::buffered_bytes() const { return state_->buffered_bytes; }

const StoreServer::Counters& StoreServer::counters() const { return state_->counters; }

KeyValueStore& StoreServer::store() { return state_->store; }

}  // namespace ddprun::store
