#pragma once
// Change notifications pushed by ddprund (extension WATCH, see wire_protocol.hpp), on a connection
// of their own. Keys are given and reported without the client's key prefix.
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "ddprun/store/async_store_client.hpp"

namespace ddprun::store {

class ClientSocket;

struct WatchEventRecord {
  wire::WatchEvent event;  // kExisting, kKeyCreated, kKeyUpdated or kKeyDeleted
  std::string key;
  std::string old_value;
  std::string new_value;
};

class AsyncStoreWatch {
 public:
  using Ms = AsyncStoreClient::Ms;

  // Opens the connection as AsyncStoreClient::connect does (VALIDATE, a PING, authentication;
  // made again where the server ends it before answering).
  static boost::asio::awaitable<std::unique_ptr<AsyncStoreWatch>> connect(
      boost::asio::any_io_executor ex, std::string host, uint16_t port, ClientOptions options = {});
  ~AsyncStoreWatch();

  // Watches one key or every key under a prefix. Returns the matching keys that exist now (as
  // kExisting records); every change after that arrives through next(), none missed, none twice.
  boost::asio::awaitable<std::vector<WatchEventRecord>> add(wire::WatchMode mode,
                                                            std::string_view key);
  // add() for each of `watches` (mode, key), sent together: one round trip for them all.
  boost::asio::awaitable<std::vector<WatchEventRecord>> add_all(
      std::vector<std::pair<wire::WatchMode, std::string>> watches);
  // The next change to any watched key. Throws StoreTimeout after `timeout` (default: the client
  // timeout; the connection stays usable) and StoreConnectionError when the server goes away.
  boost::asio::awaitable<WatchEventRecord> next(std::optional<Ms> timeout = {});
  // Closes the connection: a next() in progress fails with StoreConnectionError.
  void close();

 private:
  AsyncStoreWatch(boost::asio::any_io_executor ex, ClientOptions options);
  boost::asio::awaitable<WatchEventRecord> read_frame(Ms first_byte_timeout);

  std::unique_ptr<ClientSocket> socket_;
  ClientOptions options_;
  std::deque<WatchEventRecord> pending_;
  std::string wbuf_;
};

// Blocking form of AsyncStoreWatch.
class StoreWatch {
 public:
  using Ms = AsyncStoreWatch::Ms;
  StoreWatch(const std::string& host, uint16_t port, ClientOptions options = {});
  ~StoreWatch();
  std::vector<WatchEventRecord> add(wire::WatchMode mode, std::string_view key);
  WatchEventRecord next(std::optional<Ms> timeout = {});

 private:
  boost::asio::io_context io_;
  std::unique_ptr<AsyncStoreWatch> watch_;
};

}  // namespace ddprun::store
