#pragma once
// The TCPStore-compatible key-value server: single-threaded, on the caller's io_context. Hosted
// in-process by an agent, or standalone as `ddprund`.
//
// Each connection speaks the dialect its first bytes announce (see wire_protocol.hpp). Bad input
// costs only the connection that sent it, with one log line: a malformed frame, a length over
// Limits, an unknown opcode, a client that does not read its replies (more than
// max_pending_output_bytes queued, or not read within partial_request_timeout), a request not
// complete within partial_request_timeout of its first bytes (a deadline for the whole request,
// however slowly it trickles in), a missed keep-alive, and, when every connection's buffered bytes
// together pass max_buffered_bytes, holding the most of them.
//
// Fairness: a connection whose queued replies pass 1 MiB is not read until it has read them, large
// values go out by reference in 4 MiB writes, so one heavy client costs others a turn of the loop,
// not the length of its values. A connection that has sent nothing at all is kept: torch 1.13's
// client holds such a second, silent connection for as long as it lives.
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>

#include "ddprun/store/auth.hpp"
#include "ddprun/store/key_value_store.hpp"
#include "ddprun/store/tls.hpp"
#include "ddprun/store/wire_protocol.hpp"

namespace ddprun::store {

struct ServerOptions {
  std::string host;   // empty: every address (IPv6 dual-stack where the host has IPv6, else IPv4)
  uint16_t port = 0;  // 0: the OS picks a free port; port() tells which
  wire::Limits limits;
  size_t max_connections = 16384;  // beyond it a new connection is accepted and closed at once
  size_t max_pending_output_bytes = 256 * 1024 * 1024;
  // Every connection's partial request, queued replies and held input together; beyond it the
  // connection that holds the most is closed (one log line).
  size_t max_buffered_bytes = size_t{512} << 20;
  std::chrono::milliseconds partial_request_timeout{60'000};
  // The server lives inside an agent and ends with it (SERVER_INFO tells clients so).
  bool in_agent = false;
  // Connections the kernel queues before accept(); it caps this at net.core.somaxconn.
  size_t listen_backlog = 65535;
  // Clients that may connect at once (0: unknown). Above net.core.somaxconn, one log line says
  // that the kernel caps the backlog, and how to raise it.
  size_t expected_clients = 0;
  // With a secret, every connection authenticates first (auth.hpp): the secret grants every key,
  // a scope's token the keys under the scope. A connection that has not within auth_timeout of
  // its accept, or sends anything else first, is closed (one rate-limited log line).
  std::optional<Token> secret{};
  std::chrono::milliseconds auth_timeout{10'000};
  // Not empty: only peers with one of these addresses, or a loopback one, are served; every other
  // is closed at accept (one rate-limited log line). For stores whose clients cannot authenticate
  // (torch workers): a round's worker store, open to the round's nodes.
  std::vector<boost::asio::ip::address> allowed_peers{};
  // Given (server_tls_context), every connection speaks TLS and nothing else: one that does not
  // complete its handshake within auth_timeout, or fails it (no client certificate where the
  // context asks for one, a clear-text client), is closed with one rate-limited log line.
  TlsContext tls{};
};

class StoreServer {
 public:
  // Binds and listens before returning, so the port is held from then on (never probed and
  // released). Throws StoreError when the address cannot be bound. Serving starts right away, on
  // `io`.
  StoreServer(boost::asio::io_context& io, ServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const;
  // Stops accepting and closes every connection, sending nothing more (no watch events for the
  // owned keys that go with the connections: to clients this is the store going away, as if
  // killed). Call it on the io_context's thread.
  void stop();

  size_t connection_count() const;
  // What the server has done since it started, for metrics.
  struct Counters {
    std::array<uint64_t, wire::kOpCount> requests{};  // by operation (wire::Op)
    uint64_t connections_accepted = 0;
    uint64_t connections_refused = 0;  // over max_connections
    uint64_t connections_dropped = 0;  // closed for bad input, a slow reader, the budget, ...
    uint64_t bytes_received = 0;
    uint64_t bytes_sent = 0;  // replies, watch events and wake-ups
  };
  const Counters& counters() const;
  // Bytes held by every connection's partial request, queued replies and held input.
  size_t buffered_bytes() const;
  KeyValueStore& store();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace ddprun::store
