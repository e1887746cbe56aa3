#pragma once
// What the server and its connections share. Connections hold it by shared_ptr, so handlers that
// run after StoreServer is gone still find it.
#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "ddprun/store/store_server.hpp"
#include "ddprun/store/warning_limiter.hpp"

namespace ddprun::store {

class StoreConnection;

// Bytes read from sockets: not zeroed when made, so that only the pages reads reach are ever
// touched (a store that serves a few small requests never pays for the whole buffer).
class ReadBuffer {
 public:
  explicit ReadBuffer(size_t size)
      : bytes_(std::make_unique_for_overwrite<char[]>(size)), size_(size) {}
  char* data() { return bytes_.get(); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<char[]> bytes_;
  size_t size_;
};

struct StoreServer::State {
  State(boost::asio::io_context& io, ServerOptions opts) : options(std::move(opts)), acceptor(io) {}

  ServerOptions options;
  boost::asio::ip::tcp::acceptor acceptor;
  KeyValueStore store;
  std::unordered_set<StoreConnection*> connections;
  uint16_t port = 0;
  // Connections read into this one buffer in turn (the server is single-threaded).
  ReadBuffer read_buffer{256 * 1024};
  // With TLS, ciphertext is read into this one (and decrypted into read_buffer).
  ReadBuffer tls_buffer{options.tls ? 64 * 1024 : size_t{0}};
  bool stopped = false;
  // SERVER_INFO's instance: a restarted server is told apart from the one before it.
  uint64_t instance = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  // Dropped and refused connections: a flood of them writes a bounded log.
  WarningLimiter connection_warnings;
  // Partial requests, queued replies and held input of every connection (ServerOptions'
  // max_buffered_bytes bounds it).
  size_t buffered_bytes = 0;
  StoreServer::Counters counters;
  bool evicting = false;  // an eviction for the budget is under way
  // Over the budget: evicts the connection that holds the most.
  void enforce_budget();
  // The token of `scope` under the secret, derived once per scope (at most kScopeTokens kept).
  const Token& scope_token(const std::string& scope);
  static constexpr size_t kScopeTokens = 4096;
  std::unordered_map<std::string, Token> scope_tokens;
};

}  // namespace ddprun::store
