#pragma once
// Awaitable client of the store, for code that runs on an io_context (the agent). It speaks either
// dialect, so the same client drives ddprund and torch's own TCPStore server.
//
// Contract: one operation at a time per client (start the next after the previous completes; a
// second concurrent one throws std::logic_error). Every operation is bounded: it throws
// StoreTimeout after ClientOptions::timeout, and a wait after its own timeout. A timed-out WAIT is
// cancelled on the server (CANCEL_WAIT in the modern dialect; in the legacy dialect, which has
// none, by closing the connection and opening a new one). Any other timeout or I/O error closes the
// connection, and later operations throw StoreConnectionError.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "ddprun/store/auth.hpp"
#include "ddprun/store/tls.hpp"
#include "ddprun/store/wire_protocol.hpp"

namespace ddprun::store {

class ClientSocket;

struct ClientOptions {
  // Connecting (with retries while the server is not up yet), each operation, and waits by default.
  // torch's default.
  std::chrono::milliseconds timeout{300'000};
  wire::Dialect dialect = wire::Dialect::kModern;
  // torch's client puts "/" before every user key; keeping it lets ddprun and torch processes share
  // keys.
  std::string key_prefix = "/";
  // Replies longer than this are treated as a broken server.
  uint64_t max_value_bytes = 1ull << 30;
  // Given, the connection authenticates right after VALIDATE (modern dialect only), and fails
  // with StoreAuthError where the server refuses it or cannot prove that it knows the token.
  std::optional<Credential> credential;
  // Given (client_tls_context), the connection is TLS, its server's certificate checked against
  // the host connected to; a certificate either end refuses is a StoreAuthError.
  TlsContext tls{};
  // Called while connecting goes on trying, after a second and then every 5 s, with what is
  // waited for: a store host whose name does not resolve yet (a Kubernetes pod's name before the
  // pod is up), or a store nobody listens on yet. May be empty.
  std::function<void(const std::string&)> waiting;
};

// What SERVER_INFO tells about the server (see wire_protocol.hpp).
struct ServerInfo {
  uint64_t instance = 0;    // drawn when the server started: a restarted server has another
  bool in_agent = false;    // the server lives inside an agent and ends with it
  bool needs_auth = false;  // the server has a secret: connections must authenticate
  bool tells_time = false;  // the server answers server_time()
};

class AsyncStoreClient {
 public:
  using Ms = std::chrono::milliseconds;

  // Connects and, in the modern dialect, sends VALIDATE and checks a PING; with a credential, also
  // AUTH_BEGIN, and its proof goes out in front of the first request (whose reply is read after the
  // server's proof: a refused token fails that first operation with StoreAuthError). A connection
  // the server ends before answering the PING is made again until the timeout (a store at its
  // connection limit, a proxy whose backend is not up); a store that answers in TLS to a clear
  // client is a StoreAuthError at once.
  static boost::asio::awaitable<std::unique_ptr<AsyncStoreClient>> connect(
      boost::asio::any_io_executor ex, std::string host, uint16_t port, ClientOptions options = {});
  ~AsyncStoreClient();

  boost::asio::awaitable<void> set(std::string_view key, std::string_view value);
  // Waits until the key exists (up to the client timeout), then returns its value.
  boost::asio::awaitable<std::string> get(std::string_view key);
  boost::asio::awaitable<std::string> compare_set(std::string_view key, std::string_view expected,
                                                  std::string_view desired);
  boost::asio::awaitable<int64_t> add(std::string_view key, int64_t delta);
  boost::asio::awaitable<bool> check(const std::vector<std::string>& keys);
  // Blocks until every key exists; throws StoreTimeout after `timeout` (default: the client
  // timeout).
  boost::asio::awaitable<void> wait(const std::vector<std::string>& keys,
                                    std::optional<Ms> timeout = {});
  // Counts every key on the server, including ones without this client's prefix.
  boost::asio::awaitable<int64_t> num_keys();
  boost::asio::awaitable<bool> delete_key(std::string_view key);

  // Modern dialect only; in the legacy dialect these throw std::invalid_argument.
  boost::asio::awaitable<void> append(std::string_view key, std::string_view value);
  boost::asio::awaitable<std::vector<std::string>> multi_get(const std::vector<std::string>& keys);
  boost::asio::awaitable<void> multi_set(const std::vector<std::string>& keys,
                                         const std::vector<std::string>& values);
  // `timeout` (default: the client timeout) bounds the round trip: a heartbeat's own deadline.
  boost::asio::awaitable<uint32_t> ping(uint32_t nonce, std::optional<Ms> timeout = {});
  boost::asio::awaitable<void> queue_push(std::string_view key, std::string_view value);
  // Pops without blocking; nullopt when the queue is empty.
  boost::asio::awaitable<std::optional<std::string>> queue_pop(std::string_view key);
  boost::asio::awaitable<int64_t> queue_len(std::string_view key);
  // Keys that carry this client's prefix, with the prefix removed.
  boost::asio::awaitable<std::vector<std::string>> list_keys();
  // Returns once `world_size` callers have reached the barrier `key`; throws StoreTimeout after
  // `timeout` (default: the client timeout).
  boost::asio::awaitable<void> barrier(std::string_view key, int64_t world_size,
                                       std::optional<Ms> timeout = {});

  // ddprun extensions (see wire_protocol.hpp).
  boost::asio::awaitable<void> set_owned(std::string_view key, std::string_view value);
  boost::asio::awaitable<std::string> compare_set_owned(std::string_view key,
                                                        std::string_view expected,
                                                        std::string_view desired);
  boost::asio::awaitable<void> keepalive(Ms timeout);
  // Every key under `prefix` (given and returned without this client's key prefix) and its value,
  // in key order.
  boost::asio::awaitable<std::vector<std::pair<std::string, std::string>>> get_prefix(
      std::string_view prefix);
  boost::asio::awaitable<ServerInfo> server_info();
  // The server's wall clock, µs since the epoch (where server_info().tells_time).
  boost::asio::awaitable<int64_t> server_time();

  // Closes the connection: an operation in progress fails with StoreConnectionError, as do later
  // ones.
  void close();

 private:
  class Op;
  AsyncStoreClient(boost::asio::any_io_executor ex, std::string host, uint16_t port,
                   ClientOptions options);
  boost::asio::awaitable<void> open();
  boost::asio::awaitable<void> send(const wire::Request& req);
  // A request without a reply (SET, APPEND, QUEUE_PUSH, SET_OWNED).
  boost::asio::awaitable<void> write_only(wire::Op op, std::string_view key,
                                          std::string_view value);
  // COMPARE_SET or COMPARE_SET_OWNED.
  boost::asio::awaitable<std::string> compare_set_as(wire::Op kind, std::string_view key,
                                                     std::string_view expected,
                                                     std::string_view desired);
  // A request whose reply is one i64.
  boost::asio::awaitable<int64_t> request_i64(const wire::Request& req);
  boost::asio::awaitable<void> await_stop_waiting(std::string what, Ms timeout);
  std::string full_key(std::string_view key) const;
  wire::Request request(wire::Op op, std::string_view key = {}) const;

  std::unique_ptr<ClientSocket> socket_;
  std::string host_;
  uint16_t port_;
  ClientOptions options_;
  std::string wbuf_;
  bool busy_ = false;
  bool sent_ = false;  // the current operation has started writing its request
};

}  // namespace ddprun::store
