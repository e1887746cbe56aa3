#pragma once
// Blocking client of the store, for the worker SDK, tools and tests: AsyncStoreClient run on a
// private io_context. Same operations, same contracts (see async_store_client.hpp). Not
// thread-safe.
#include <boost/asio/io_context.hpp>

#include "ddprun/store/async_store_client.hpp"

namespace ddprun::store {

class StoreClient {
 public:
  using Ms = AsyncStoreClient::Ms;

  // Connects before returning; throws StoreTimeout or StoreConnectionError.
  StoreClient(const std::string& host, uint16_t port, ClientOptions options = {});
  ~StoreClient();

  void set(std::string_view key, std::string_view value);
  std::string get(std::string_view key);
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired);
  int64_t add(std::string_view key, int64_t delta);
  bool check(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::optional<Ms> timeout = {});
  int64_t num_keys();
  bool delete_key(std::string_view key);
  void append(std::string_view key, std::string_view value);
  std::vector<std::string> multi_get(const std::vector<std::string>& keys);
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values);
  uint32_t ping(uint32_t nonce);
  void queue_push(std::string_view key, std::string_view value);
  std::optional<std::string> queue_pop(std::string_view key);
  int64_t queue_len(std::string_view key);
  std::vector<std::string> list_keys();
  void barrier(std::string_view key, int64_t world_size, std::optional<Ms> timeout = {});
  void set_owned(std::string_view key, std::string_view value);
  std::string compare_set_owned(std::string_view key, std::string_view expected,
                                std::string_view desired);
  void keepalive(Ms timeout);
  std::vector<std::pair<std::string, std::string>> get_prefix(std::string_view prefix);

 private:
  template <class T>
  T run(boost::asio::awaitable<T> op);

  boost::asio::io_context io_;
  std::unique_ptr<AsyncStoreClient> client_;
};

}  // namespace ddprun::store
