#include "ddprun/store/store_client.hpp"

#include <future>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include "blocking_run.hpp"

namespace ddprun::store {

template <class T>
T StoreClient::run(boost::asio::awaitable<T> op) {
  return run_blocking(io_, std::move(op));
}

StoreClient::StoreClient(const std::string& host, uint16_t port, ClientOptions options)
    : client_(run_blocking(
          io_, AsyncStoreClient::connect(io_.get_executor(), host, port, std::move(options)))) {}

StoreClient::~StoreClient() = default;

void StoreClient::set(std::string_view key, std::string_view value) {
  run(client_->set(key, value));
}
std::string StoreClient::get(std::string_view key) { return run(client_->get(key)); }
std::string StoreClient::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired) {
  return run(client_->compare_set(key, expected, desired));
}
int64_t StoreClient::add(std::string_view key, int64_t delta) {
  return run(client_->add(key, delta));
}
bool StoreClient::check(const std::vector<std::string>& keys) { return run(client_->check(keys)); }
void StoreClient::wait(const std::vector<std::string>& keys, std::optional<Ms> timeout) {
  run(client_->wait(keys, timeout));
}
int64_t StoreClient::num_keys() { return run(client_->num_keys()); }
bool StoreClient::delete_key(std::string_view key) { return run(client_->delete_key(key)); }
void StoreClient::append(std::string_view key, std::string_view value) {
  run(client_->append(key, value));
}
std::vector<std::string> StoreClient::multi_get(const std::vector<std::string>& keys) {
  return run(client_->multi_get(keys));
}
void StoreClient::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values) {
  run(client_->multi_set(keys, values));
}
uint32_t StoreClient::ping(uint32_t nonce) { return run(client_->ping(nonce)); }
void StoreClient::queue_push(std::string_view key, std::string_view value) {
  run(client_->queue_push(key, value));
}
std::optional<std::string> StoreClient::queue_pop(std::string_view key) {
  return run(client_->queue_pop(key));
}
int64_t StoreClient::queue_len(std::string_view key) { return run(client_->queue_len(key)); }
std::vector<std::string> StoreClient::list_keys() { return run(client_->list_keys()); }
std::vector<std::pair<std::string, std::string>> StoreClient::get_prefix(std::string_view prefix) {
  return run(client_->get_prefix(prefix));
}
void StoreClient::barrier(std::string_view key, int64_t world_size, std::optional<Ms> timeout) {
  run(client_->barrier(key, world_size, timeout));
}
void StoreClient::set_owned(std::string_view key, std::string_view value) {
  run(client_->set_owned(key, value));
}

std::string StoreClient::compare_set_owned(std::string_view key, std::string_view expected,
                                           std::string_view desired) {
  return run(client_->compare_set_owned(key, expected, desired));
}
void StoreClient::keepalive(Ms timeout) { run(client_->keepalive(timeout)); }

}  // namespace ddprun::store
