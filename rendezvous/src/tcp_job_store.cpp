#include "ddprun/rendezvous/tcp_job_store.hpp"

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/rendezvous/async_store_client.hpp"
#include "ddprun/rendezvous/errors.hpp"
#include "ddprun/rendezvous/store_watch.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;

TcpJobStore::TcpJobStore(asio::any_io_executor ex, TcpJobStoreSpec spec)
    : ex_(ex), spec_(std::move(spec)), base_(job_key(spec_.run_id, "")), heartbeat_timer_(ex) {}

TcpJobStore::~TcpJobStore() = default;

std::string TcpJobStore::job_key(const std::string& run_id, const std::string& key) {
  return "ddprun/" + run_id + "/" + key;
}

std::string TcpJobStore::server_key(const std::string& run_id, const std::string& key) {
  return ClientOptions{}.key_prefix + job_key(run_id, key);
}

void TcpJobStore::check_open() const {
  if (!broken_.empty()) throw StoreConnectionError(broken_);
}

asio::awaitable<std::vector<KeyEvent>> TcpJobStore::join(std::string presence_key,
                                                         std::string value) {
  ClientOptions o;
  o.timeout = spec_.join_timeout;
  const auto port = static_cast<uint16_t>(spec_.port);
  // After each step: leave() (a signal) may have come meanwhile; what opened since is closed too.
  const auto check_open = [this] {
    if (!broken_.empty()) lost(std::string(broken_));
    this->check_open();
  };
  presence_ = co_await AsyncStoreClient::connect(ex_, spec_.host, port, o);
  check_open();
  co_await presence_->keepalive(spec_.heartbeat_timeout);
  const std::string full_key = base_ + presence_key;  // (named: no temporaries into a co_await)
  co_await presence_->set_owned(full_key, value);
  co_await presence_->ping(0);  // a round trip: the key exists before the watch below starts
  co_await ensure_client();
  check_open();
  watch_ = co_await AsyncStoreWatch::connect(ex_, spec_.host, port, o);
  check_open();
  std::vector<KeyEvent> snapshot;
  for (auto& e : co_await watch_->add(wire::WatchMode::kPrefix, base_)) {
    snapshot.push_back(KeyEvent{e.key.substr(base_.size()), std::move(e.new_value), false});
  }
  asio::co_spawn(ex_, heartbeat(), asio::detached);
  co_return snapshot;
}

asio::awaitable<void> TcpJobStore::ensure_client() {
  check_open();
  if (client_) co_return;
  ClientOptions o;
  o.timeout = spec_.join_timeout;
  auto client =
      co_await AsyncStoreClient::connect(ex_, spec_.host, static_cast<uint16_t>(spec_.port), o);
  if (!broken_.empty()) client->close();  // left meanwhile
  check_open();
  client_ = std::move(client);
}

asio::awaitable<void> TcpJobStore::heartbeat() {
  const auto self = shared_from_this();  // the object outlives this coroutine
  for (uint32_t n = 1; broken_.empty(); ++n) {
    heartbeat_timer_.expires_after(spec_.heartbeat_timeout / 3);
    co_await heartbeat_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!broken_.empty()) break;
    try {
      co_await presence_->ping(n, spec_.heartbeat_timeout);
    } catch (const std::exception& e) {
      lost(fmt::format("lost the connection to the rendezvous store: {}", e.what()));
    }
  }
}

asio::awaitable<KeyEvent> TcpJobStore::next_event() {
  for (;;) {
    check_open();
    try {
      WatchEventRecord e = co_await watch_->next(std::chrono::hours(24));
      if (!e.key.starts_with(base_)) continue;
      KeyEvent out;
      out.key = e.key.substr(base_.size());
      out.deleted = e.event == wire::WatchEvent::kKeyDeleted;
      if (!out.deleted) out.value = std::move(e.new_value);
      co_return out;
    } catch (const StoreTimeout&) {
    } catch (const std::exception& e) {
      if (broken_.empty())
        lost(fmt::format("lost the connection to the rendezvous store: {}", e.what()));
    }
  }
}

asio::awaitable<std::string> TcpJobStore::compare_set(std::string key, std::string expected,
                                                      std::string desired) {
  co_await ensure_client();
  const std::string full_key = base_ + key;
  co_return co_await client_->compare_set(full_key, expected, desired);
}

asio::awaitable<void> TcpJobStore::set(std::string key, std::string value) {
  co_await ensure_client();
  const std::string full_key = base_ + key;
  co_await client_->set(full_key, value);
}

asio::awaitable<std::vector<KeyEvent>> TcpJobStore::read_prefix(std::string prefix) {
  co_await ensure_client();
  const std::string full_prefix = base_ + prefix;
  std::vector<KeyEvent> out;
  for (auto& [k, v] : co_await client_->get_prefix(full_prefix)) {
    out.push_back(KeyEvent{k.substr(base_.size()), std::move(v), false});
  }
  co_return out;
}

void TcpJobStore::lost(std::string why) {
  broken_ = std::move(why);
  // Closing, not destroying: coroutines may be suspended inside these objects; they finish on the
  // errors the close produces.
  if (presence_) presence_->close();
  if (client_) client_->close();
  if (watch_) watch_->close();
  heartbeat_timer_.cancel();
}

void TcpJobStore::leave() {
  if (broken_.empty()) lost("this agent left the job");
}

}  // namespace ddprun::rendezvous
