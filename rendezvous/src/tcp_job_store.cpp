#include "ddprun/rendezvous/tcp_job_store.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/rendezvous/errors.hpp"
#include "ddprun/rendezvous/store_watch.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using Ms = std::chrono::milliseconds;

namespace {

// One try at reaching the store during an outage: short, so that whether it refuses connections
// (down for everyone) or does not answer (cut off) is known well within a heartbeat timeout.
constexpr Ms kReconnectTry{250};

double seconds(Ms d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

TcpJobStore::TcpJobStore(asio::any_io_executor ex, TcpJobStoreSpec spec)
    : ex_(ex),
      spec_(std::move(spec)),
      base_(job_key(spec_.run_id, "")),
      heartbeat_timer_(ex),
      wake_(ex, Clock::time_point::max()) {}

TcpJobStore::~TcpJobStore() = default;

std::string TcpJobStore::job_key(const std::string& run_id, const std::string& key) {
  return "ddprun/" + run_id + "/" + key;
}

std::string TcpJobStore::server_key(const std::string& run_id, const std::string& key) {
  return ClientOptions{}.key_prefix + job_key(run_id, key);
}

std::string TcpJobStore::endpoint() const { return fmt::format("{}:{}", spec_.host, spec_.port); }

void TcpJobStore::check_open() const {
  if (!broken_.empty()) throw StoreConnectionError(broken_);
}

bool TcpJobStore::is_presence_key(const std::string& key) const {
  return !presence_folder_.empty() && key.starts_with(presence_folder_);
}

void TcpJobStore::remember(const KeyEvent& e) {
  if (e.deleted) {
    known_.erase(e.key);
  } else {
    known_[e.key] = e.value;
  }
}

void TcpJobStore::queue(KeyEvent e) {
  remember(e);
  pending_.push_back(std::move(e));
  wake();
}

asio::awaitable<void> TcpJobStore::wait_for_wake() {
  co_await wake_.async_wait(asio::as_tuple(asio::use_awaitable));
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
  presence_key_ = presence_key;
  presence_value_ = value;
  presence_folder_ = presence_key.substr(0, presence_key.rfind('/') + 1);
  presence_ = co_await AsyncStoreClient::connect(ex_, spec_.host, port, o);
  check_open();
  server_ = co_await presence_->server_info();
  co_await presence_->keepalive(spec_.heartbeat_timeout);
  lease_start_ = Clock::now();
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
    known_[snapshot.back().key] = snapshot.back().value;
  }
  joined_ = true;
  asio::co_spawn(ex_, heartbeat(), asio::detached);
  co_return snapshot;
}

asio::awaitable<void> TcpJobStore::ensure_client() {
  check_open();
  if (client_) co_return;
  ClientOptions o;
  o.timeout = spec_.join_timeout;
  std::shared_ptr<AsyncStoreClient> client =
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
    if (reconnecting_) continue;
    const auto sent = Clock::now();
    if (sent - lease_start_ >= spec_.heartbeat_timeout) {
      // This agent did not run for longer than its lease (SIGSTOP, a VM pause, a swap storm): the
      // store has dropped its presence already.
      presence_ok_ = false;
      connection_lost(fmt::format(
          "this agent was not heard from for {:.1f} s (paused?), longer than the heartbeat "
          "timeout",
          seconds(std::chrono::duration_cast<Ms>(sent - lease_start_))));
      continue;
    }
    const auto presence = presence_;
    try {
      co_await presence->ping(n, spec_.heartbeat_timeout);
      if (presence == presence_) lease_start_ = std::max(lease_start_, sent);
    } catch (const std::exception& e) {
      if (presence == presence_) {
        presence_ok_ = false;
        connection_lost(e.what());
      }
    }
  }
}

void TcpJobStore::connection_lost(const std::string& why) {
  if (!broken_.empty() || reconnecting_) return;
  reconnecting_ = true;
  const uint64_t outage = ++outage_;
  outage_start_ = Clock::now();
  refused_ = false;
  last_error_ = why;
  spdlog::warn("lost the connection to the rendezvous store at {} ({}); reconnecting", endpoint(),
               why);
  // The request and watch connections are re-made; so is the presence one unless it still works.
  if (client_) client_->close();
  if (watch_) watch_->close();
  if (!presence_ok_ && presence_) presence_->close();
  asio::co_spawn(ex_, reconnect(outage), asio::detached);
  asio::co_spawn(ex_, watch_lease(outage), asio::detached);
  wake();
}

void TcpJobStore::report_expelled(const std::string& why) {
  if (!known_.contains(presence_key_)) return;
  spdlog::warn(
      "this node's presence in the job has lapsed ({}): its peers go on without it; its workers "
      "are stopped and it rejoins as a new node",
      why);
  queue(KeyEvent{presence_key_, "", true});
}

asio::awaitable<void> TcpJobStore::watch_lease(uint64_t outage) {
  const auto self = shared_from_this();
  asio::steady_timer timer(ex_);
  timer.expires_at(lease_start_ + spec_.heartbeat_timeout);
  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  if (outage != outage_ || !reconnecting_ || !broken_.empty()) co_return;
  if (refused_) {
    spdlog::warn(
        "the rendezvous store at {} is down (connection refused) for every node: the workers keep "
        "running while it is waited for (rdzv_conf reconnect_timeout={:g} s)",
        endpoint(), seconds(spec_.reconnect_timeout));
    co_return;
  }
  report_expelled(fmt::format("the store has not been reached for the heartbeat timeout of {:g} s",
                              seconds(spec_.heartbeat_timeout)));
}

asio::awaitable<void> TcpJobStore::reconnect(uint64_t outage) {
  const auto self = shared_from_this();
  for (;;) {
    if (!broken_.empty() || outage != outage_) co_return;
    const auto limit = server_.in_agent ? spec_.heartbeat_timeout : spec_.reconnect_timeout;
    const auto deadline = outage_start_ + limit;
    if (Clock::now() >= deadline) {
      lost(fmt::format(
          "lost the connection to the rendezvous store at {} and could not reconnect within {:g} "
          "s{}: {}",
          endpoint(), seconds(limit),
          server_.in_agent ? " (the heartbeat timeout; the store lived in an agent)"
                           : " (rdzv_conf reconnect_timeout)",
          last_error_));
      co_return;
    }
    if (co_await try_reconnect(outage, deadline)) co_return;
    if (refused_ && server_.in_agent && broken_.empty()) {
      lost(fmt::format(
          "the rendezvous store at {} is gone (connection refused): it lived in another node's "
          "agent, which has stopped",
          endpoint()));
      co_return;
    }
  }
}

asio::awaitable<bool> TcpJobStore::try_reconnect(uint64_t outage, Clock::time_point deadline) {
  ClientOptions o;
  o.timeout = std::min<Ms>(kReconnectTry, std::chrono::duration_cast<Ms>(std::max(
                                              deadline - Clock::now(), Clock::duration(0))));
  const auto port = static_cast<uint16_t>(spec_.port);
  std::shared_ptr<AsyncStoreClient> probe, client, presence;
  std::shared_ptr<AsyncStoreWatch> watch;
  std::map<std::string, std::string> now_there;
  ServerInfo info;
  bool restarted = false;
  size_t restored = 0;
  try {
    probe = co_await AsyncStoreClient::connect(ex_, spec_.host, port, o);
    info = co_await probe->server_info();
    probe->close();
    restarted = info.instance != server_.instance;
    o.timeout = std::max<Ms>(spec_.heartbeat_timeout, Ms(1000));  // the store answers: let it work
    client = co_await AsyncStoreClient::connect(ex_, spec_.host, port, o);
    if (restarted) {
      // It lost every key: put back the job's (the first agent back does it, the rest agree).
      const std::map<std::string, std::string> keys = known_;
      for (const auto& [key, value] : keys) {
        if (is_presence_key(key)) continue;
        const std::string full_key = base_ + key;
        co_await client->compare_set(full_key, "", value);
        ++restored;
      }
    }
    if (restarted || !presence_ok_) {
      presence = co_await AsyncStoreClient::connect(ex_, spec_.host, port, o);
      co_await presence->keepalive(spec_.heartbeat_timeout);
      const std::string full_key = base_ + presence_key_;
      co_await presence->set_owned(full_key, presence_value_);
      co_await presence->ping(0);
    }
    watch = co_await AsyncStoreWatch::connect(ex_, spec_.host, port, o);
    for (auto& e : co_await watch->add(wire::WatchMode::kPrefix, base_)) {
      now_there[e.key.substr(base_.size())] = std::move(e.new_value);
    }
  } catch (const StoreRefused& e) {
    refused_ = true;
    last_error_ = e.what();
  } catch (const std::exception& e) {
    refused_ = false;
    last_error_ = e.what();
  }
  if (!watch || !broken_.empty() || outage != outage_) {
    if (probe) probe->close();
    if (client) client->close();
    if (presence) presence->close();
    if (watch) watch->close();
    co_return false;
  }
  Reconnection r;
  r.client = std::move(client);
  r.presence = std::move(presence);
  r.watch = std::move(watch);
  r.now_there = std::move(now_there);
  r.info = info;
  r.restarted = restarted;
  r.restored = restored;
  resume(std::move(r));
  co_return true;
}

void TcpJobStore::resume(Reconnection r) {
  // The store answers again. What this agent missed becomes events, in this order: its own
  // presence gone (peers saw it leave), then every key that differs.
  const auto now = Clock::now();
  const bool lease_over = now - lease_start_ >= spec_.heartbeat_timeout;
  if (!r.restarted && !presence_ok_) {
    report_expelled("its connection to the store was dropped, and its peers saw it leave");
  } else if (r.restarted && lease_over && !refused_) {
    report_expelled("it was not heard from for longer than the heartbeat timeout");
  }
  if (r.presence) presence_ = std::move(r.presence);
  client_ = std::move(r.client);
  watch_ = std::move(r.watch);
  server_ = r.info;
  presence_ok_ = true;
  lease_start_ = now;
  for (const auto& [key, value] : r.now_there) {
    withheld_.erase(key);
    if (auto it = known_.find(key); it == known_.end() || it->second != value) {
      queue(KeyEvent{key, value, false});
    }
  }
  std::vector<std::string> gone;
  for (const auto& [key, _] : known_) {
    if (!r.now_there.contains(key)) gone.push_back(key);
  }
  for (const auto& key : gone) {
    if (r.restarted && is_presence_key(key) && key != presence_key_) {
      withheld_[key] = now + spec_.heartbeat_timeout;  // that peer's time to come back
    } else {
      queue(KeyEvent{key, "", true});
    }
  }
  const auto took = std::chrono::duration_cast<Ms>(now - outage_start_);
  if (r.restarted) {
    spdlog::warn(
        "reconnected to the rendezvous store at {} after {} ms: it had restarted and lost the "
        "job's "
        "keys; this node put back the {} it knew (the first node back restores them)",
        endpoint(), took.count(), r.restored);
  } else {
    spdlog::info("reconnected to the rendezvous store at {} after {} ms", endpoint(), took.count());
  }
  reconnecting_ = false;
  wake();
}

asio::awaitable<KeyEvent> TcpJobStore::next_event() {
  const auto self = shared_from_this();
  for (;;) {
    check_open();
    if (!pending_.empty()) {
      KeyEvent e = std::move(pending_.front());
      pending_.pop_front();
      co_return e;
    }
    if (reconnecting_) {
      co_await wait_for_wake();
      continue;
    }
    const auto now = Clock::now();
    Ms timeout = std::chrono::hours(24);
    for (auto it = withheld_.begin(); it != withheld_.end();) {
      if (it->second <= now) {
        spdlog::info("rendezvous: {} did not come back after the store restarted", it->first);
        if (known_.contains(it->first)) queue(KeyEvent{it->first, "", true});
        it = withheld_.erase(it);
      } else {
        timeout = std::min(timeout, std::chrono::duration_cast<Ms>(it->second - now) + Ms(1));
        ++it;
      }
    }
    if (!pending_.empty()) continue;
    const auto watch = watch_;
    try {
      WatchEventRecord e = co_await watch->next(timeout);
      if (watch != watch_ || !e.key.starts_with(base_)) continue;
      KeyEvent out;
      out.key = e.key.substr(base_.size());
      out.deleted = e.event == wire::WatchEvent::kKeyDeleted;
      if (!out.deleted) out.value = std::move(e.new_value);
      withheld_.erase(out.key);
      remember(out);
      co_return out;
    } catch (const StoreTimeout&) {
    } catch (const std::exception& e) {
      if (watch == watch_) connection_lost(e.what());
    }
  }
}

asio::awaitable<std::shared_ptr<AsyncStoreClient>> TcpJobStore::usable_client() {
  if (!joined_) {
    co_await ensure_client();
    co_return client_;
  }
  const auto self = shared_from_this();
  while (reconnecting_ && broken_.empty()) co_await wait_for_wake();
  check_open();
  co_return client_;
}

void TcpJobStore::request_failed(const std::exception& e) {
  if (!joined_) throw;
  check_open();
  connection_lost(e.what());
}

asio::awaitable<std::string> TcpJobStore::compare_set(std::string key, std::string expected,
                                                      std::string desired) {
  const std::string full_key = base_ + key;
  for (;;) {
    const auto client = co_await usable_client();
    try {
      co_return co_await client->compare_set(full_key, expected, desired);
    } catch (const std::exception& e) {
      request_failed(e);
    }
  }
}

asio::awaitable<void> TcpJobStore::set(std::string key, std::string value) {
  const std::string full_key = base_ + key;
  for (;;) {
    const auto client = co_await usable_client();
    try {
      co_await client->set(full_key, value);
      co_return;
    } catch (const std::exception& e) {
      request_failed(e);
    }
  }
}

asio::awaitable<std::vector<KeyEvent>> TcpJobStore::read_prefix(std::string prefix) {
  const std::string full_prefix = base_ + prefix;
  for (;;) {
    const auto client = co_await usable_client();
    std::vector<std::pair<std::string, std::string>> entries;
    try {
      entries = co_await client->get_prefix(full_prefix);
    } catch (const std::exception& e) {
      request_failed(e);
      continue;
    }
    std::vector<KeyEvent> out;
    for (auto& [k, v] : entries)
      out.push_back(KeyEvent{k.substr(base_.size()), std::move(v), false});
    co_return out;
  }
}

void TcpJobStore::lost(std::string why) {
  broken_ = std::move(why);
  // Closing, not destroying: coroutines may be suspended inside these objects; they finish on the
  // errors the close produces.
  if (presence_) presence_->close();
  if (client_) client_->close();
  if (watch_) watch_->close();
  heartbeat_timer_.cancel();
  wake();
}

void TcpJobStore::leave() {
  if (broken_.empty()) lost("this agent left the job");
}

}  // namespace ddprun::rendezvous
