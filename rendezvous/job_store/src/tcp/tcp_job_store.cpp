#include "ddprun/job_store/tcp_job_store.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "cancellable.hpp"
#include "ddprun/store/async_mutex.hpp"
#include "ddprun/store/errors.hpp"
#include "ddprun/store/store_watch.hpp"
#include "ddprun/store/wall_clock.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using Ms = std::chrono::milliseconds;

namespace {

double seconds(Ms d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

TcpJobStore::TcpJobStore(asio::any_io_executor ex, TcpJobStoreSpec spec)
    : ex_(ex),
      spec_(std::move(spec)),
      tls_(store::client_tls_context(spec_.tls)),
      base_(job_key(spec_.run_id, "")),
      requests_(std::make_unique<store::AsyncMutex>(ex)),
      presence_turn_(std::make_unique<store::AsyncMutex>(ex)),
      extra_turn_(std::make_unique<store::AsyncMutex>(ex)),
      heartbeat_timer_(ex),
      lease_timer_(ex) {}

TcpJobStore::~TcpJobStore() = default;

std::string TcpJobStore::job_key(const std::string& run_id, const std::string& key) {
  return "ddprun/" + run_id + "/" + key;
}

std::string TcpJobStore::server_key(const std::string& run_id, const std::string& key) {
  return store::ClientOptions{}.key_prefix + job_key(run_id, key);
}

asio::awaitable<void> TcpJobStore::measure_clock() {
  if (!server_.tells_time) co_return;
  constexpr int kTries = 3;
  for (int i = 0; i < kTries; ++i) {
    const int64_t sent = store::wall_clock_micros();
    const int64_t theirs = co_await presence_->server_time();
    const int64_t back = store::wall_clock_micros();
    const ClockOffset o{theirs - (sent + back) / 2, back - sent};
    if (!clock_ || o.round_trip_micros < clock_->round_trip_micros) clock_ = o;
  }
}

void TcpJobStore::check_credential(const store::ServerInfo& server) const {
  if (server.needs_auth && !spec_.token) {
    throw store::StoreAuthError(fmt::format(
        "the store at {} serves only clients with a token: give --rdzv_conf auth_token_file=PATH",
        endpoint()));
  }
}

store::ClientOptions TcpJobStore::client_options() const {
  store::ClientOptions o;
  if (spec_.token) o.credential = store::Credential{server_key(spec_.run_id, ""), *spec_.token};
  o.tls = tls_;
  o.waiting = [](const std::string& what) { spdlog::info("rendezvous: {}", what); };
  return o;
}

std::string TcpJobStore::endpoint() const { return fmt::format("{}:{}", spec_.host, spec_.port); }

void TcpJobStore::check_open() const {
  if (!broken_.empty()) throw store::StoreConnectionError(broken_);
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

asio::awaitable<void> TcpJobStore::wait_for_wake(Clock::time_point deadline) {
  asio::steady_timer timer(ex_, deadline);
  sleepers_.push_back(&timer);
  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  std::erase(sleepers_, &timer);
}

asio::awaitable<std::shared_ptr<store::AsyncStoreWatch>> TcpJobStore::open_watch(
    store::ClientOptions options, std::vector<std::string> keys, std::vector<std::string> prefixes,
    std::map<std::string, std::string>& now_there) {
  auto connecting =
      store::AsyncStoreWatch::connect(ex_, spec_.host, static_cast<uint16_t>(spec_.port), options);
  std::shared_ptr<store::AsyncStoreWatch> watch =
      co_await cancellable(ex_, connecting_, std::move(connecting));
  try {
    std::vector<std::pair<store::wire::WatchMode, std::string>> watches;
    for (const auto& key : keys) watches.emplace_back(store::wire::WatchMode::kKey, base_ + key);
    for (const auto& p : prefixes) watches.emplace_back(store::wire::WatchMode::kPrefix, base_ + p);
    for (auto& e : co_await watch->add_all(std::move(watches))) {
      now_there[e.key.substr(base_.size())] = std::move(e.new_value);
    }
  } catch (...) {
    watch->close();
    throw;
  }
  co_return watch;
}

asio::awaitable<void> TcpJobStore::read_events(std::shared_ptr<store::AsyncStoreWatch> watch) {
  const auto self = shared_from_this();  // the object outlives this coroutine
  while (broken_.empty() && current(watch)) {
    try {
      store::WatchEventRecord e = co_await watch->next(std::chrono::hours(24));
      if (!current(watch) || !e.key.starts_with(base_)) continue;
      KeyEvent out;
      out.key = e.key.substr(base_.size());
      out.deleted = e.event == store::wire::WatchEvent::kKeyDeleted;
      if (!out.deleted) out.value = std::move(e.new_value);
      withheld_.erase(out.key);
      queue(std::move(out));
    } catch (const store::StoreTimeout&) {
    } catch (const std::exception& e) {
      if (current(watch)) connection_lost(e.what());
      break;
    }
  }
}

asio::awaitable<std::vector<KeyEvent>> TcpJobStore::join(std::string presence_key,
                                                         std::string value, WatchSet watched) {
  store::ClientOptions o = client_options();
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
  watched_ = std::move(watched);
  auto connecting = store::AsyncStoreClient::connect(ex_, spec_.host, port, o);
  presence_ = co_await cancellable(ex_, connecting_, std::move(connecting));
  check_open();
  server_ = co_await presence_->server_info();
  check_credential(server_);
  co_await measure_clock();
  co_await presence_->keepalive(spec_.heartbeat_timeout);
  lease_start_ = Clock::now();
  const std::string full_key = base_ + presence_key;  // (named: no temporaries into a co_await)
  co_await presence_->set_owned(full_key, value);
  co_await presence_->ping(0);  // a round trip: the key exists before the watch below starts
  {
    const auto turn = co_await requests_->lock();
    co_await ensure_client();
  }
  check_open();
  std::map<std::string, std::string> now_there;
  watch_ = co_await open_watch(o, watched_.keys, watched_.prefixes, now_there);
  check_open();
  std::vector<KeyEvent> snapshot;
  for (auto& [key, v] : now_there) {
    known_[key] = v;
    snapshot.push_back(KeyEvent{key, std::move(v), false});
  }
  joined_ = true;
  asio::co_spawn(ex_, read_events(watch_), asio::detached);
  asio::co_spawn(ex_, heartbeat(), asio::detached);
  co_return snapshot;
}

asio::awaitable<std::vector<KeyEvent>> TcpJobStore::watch_prefixes(
    std::vector<std::string> prefixes) {
  const auto self = shared_from_this();
  const auto turn = co_await extra_turn_->lock();  // (what is fresh depends on the calls before)
  std::vector<std::string> fresh;
  for (auto& p : prefixes) {
    if (std::find(extra_prefixes_.begin(), extra_prefixes_.end(), p) == extra_prefixes_.end() &&
        std::find(fresh.begin(), fresh.end(), p) == fresh.end()) {
      fresh.push_back(std::move(p));
    }
  }
  std::vector<KeyEvent> snapshot;
  if (fresh.empty()) co_return snapshot;
  const auto is_fresh = [&](const std::string& key) {
    return std::any_of(fresh.begin(), fresh.end(),
                       [&](const std::string& p) { return key.starts_with(p); });
  };
  for (;;) {
    while (reconnecting_ && broken_.empty()) co_await wait_for_wake();
    check_open();
    std::vector<std::string> all = extra_prefixes_;
    all.insert(all.end(), fresh.begin(), fresh.end());
    store::ClientOptions o = client_options();
    o.timeout = std::max<Ms>(spec_.heartbeat_timeout, Ms(1000));
    std::map<std::string, std::string> now_there;
    std::shared_ptr<store::AsyncStoreWatch> watch;
    try {
      const std::vector<std::string> no_keys;
      watch = co_await open_watch(o, no_keys, all, now_there);
    } catch (const std::exception& e) {
      check_open();
      connection_lost(e.what());
      continue;
    }
    if (!broken_.empty() || reconnecting_) {  // the session moved on meanwhile: try again
      watch->close();
      continue;
    }
    // The old connection's prefixes: what changed since it last reported comes as events.
    const auto was_followed = [&](const std::string& key) {
      return !is_fresh(key) &&
             std::any_of(extra_prefixes_.begin(), extra_prefixes_.end(),
                         [&](const std::string& p) { return key.starts_with(p); });
    };
    if (extra_watch_) extra_watch_->close();
    extra_watch_ = watch;
    extra_prefixes_ = std::move(all);
    std::map<std::string, std::string> old_part;
    for (auto& [key, v] : now_there) {
      if (is_fresh(key) && !known_.contains(key)) {
        known_[key] = v;
        snapshot.push_back(KeyEvent{key, v, false});
      } else if (!is_fresh(key)) {
        old_part[key] = v;
      }
    }
    catch_up(old_part, was_followed, false);
    asio::co_spawn(ex_, read_events(extra_watch_), asio::detached);
    co_return snapshot;
  }
}

asio::awaitable<std::string> TcpJobStore::claim_on(store::AsyncStoreClient& presence,
                                                   const std::string& full_key,
                                                   const std::string& value) {
  std::string now = co_await presence.compare_set_owned(full_key, "", value);
  // This agent's value there may be held by an earlier presence of its own that the store has not
  // dropped yet (cut off, then back): bound to this one, so that it lasts as long as this one.
  if (now == value) now = co_await presence.compare_set_owned(full_key, value, value);
  co_return now;
}

asio::awaitable<std::string> TcpJobStore::claim(std::string key, std::string value) {
  const auto self = shared_from_this();
  claimable_.insert(key);
  const std::string full_key = base_ + key;
  for (;;) {
    while (reconnecting_ && broken_.empty()) co_await wait_for_wake();
    check_open();
    const auto turn = co_await presence_turn_->lock();
    const auto presence = presence_;
    std::string now;
    try {
      now = co_await claim_on(*presence, full_key, value);
    } catch (const std::exception& e) {
      check_open();
      if (presence == presence_) {
        presence_ok_ = false;
        connection_lost(e.what());
      }
      continue;
    }
    if (presence != presence_) continue;  // replaced meanwhile: claim on the new one
    if (now == value) {
      claims_[key] = value;
    } else {
      claims_.erase(key);  // another agent's: what this one held before is gone
    }
    co_return now;
  }
}

asio::awaitable<void> TcpJobStore::ensure_client() {
  check_open();
  if (client_) co_return;
  store::ClientOptions o = client_options();
  o.timeout = spec_.join_timeout;
  auto connecting =
      store::AsyncStoreClient::connect(ex_, spec_.host, static_cast<uint16_t>(spec_.port), o);
  std::shared_ptr<store::AsyncStoreClient> client =
      co_await cancellable(ex_, connecting_, std::move(connecting));
  if (!spec_.token) check_credential(co_await client->server_info());
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
    const auto turn = co_await presence_turn_->lock();
    if (!broken_.empty()) break;
    if (reconnecting_) continue;
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

asio::awaitable<KeyEvent> TcpJobStore::next_event() {
  const auto self = shared_from_this();
  for (;;) {
    check_open();
    const auto now = Clock::now();
    auto wake_at = Clock::time_point::max();
    for (auto it = withheld_.begin(); it != withheld_.end();) {
      if (it->second <= now) {
        spdlog::info("rendezvous: {} did not come back after the store restarted", it->first);
        // Its end is an event even where this agent's view had dropped the key already (it
        // rejoined meanwhile): whoever waited on the grace (unconfirmed()) looks again.
        queue(KeyEvent{it->first, "", true});
        it = withheld_.erase(it);
      } else {
        wake_at = std::min(wake_at, it->second);
        ++it;
      }
    }
    if (!pending_.empty()) {
      KeyEvent e = std::move(pending_.front());
      pending_.pop_front();
      co_return e;
    }
    co_await wait_for_wake(wake_at);
  }
}

asio::awaitable<std::shared_ptr<store::AsyncStoreClient>> TcpJobStore::usable_client() {
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
  const auto turn = co_await requests_->lock();
  for (;;) {
    const auto client = co_await usable_client();
    try {
      co_return co_await client->compare_set(full_key, expected, desired);
    } catch (const std::exception& e) {
      request_failed(e);
    }
  }
}

asio::awaitable<std::optional<std::string>> TcpJobStore::compare_set_holding(std::string claim,
                                                                             std::string key,
                                                                             std::string expected,
                                                                             std::string desired) {
  const std::string full_key = base_ + key;
  const auto turn = co_await requests_->lock();
  for (;;) {
    const auto client = co_await usable_client();
    if (!holds(claim)) co_return std::nullopt;
    try {
      co_return co_await client->compare_set(full_key, expected, desired);
    } catch (const std::exception& e) {
      request_failed(e);
    }
  }
}

asio::awaitable<void> TcpJobStore::set(std::string key, std::string value) {
  const std::string full_key = base_ + key;
  const auto turn = co_await requests_->lock();
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

bool TcpJobStore::holds(const std::string& claim) const {
  // The server drops the presence, and the claims with it, a heartbeat timeout after the last
  // heartbeat it got, which is after lease_start_.
  return claims_.contains(claim) && presence_ok_ &&
         Clock::now() - lease_start_ < spec_.heartbeat_timeout;
}

asio::awaitable<bool> TcpJobStore::set_all_holding(
    std::string claim, std::vector<std::pair<std::string, std::string>> entries) {
  constexpr size_t kPerRequest = 4096;  // well within the server's keys per request
  const auto turn = co_await requests_->lock();
  for (size_t from = 0; from < entries.size(); from += kPerRequest) {
    std::vector<std::string> keys, values;
    for (size_t i = from; i < std::min(entries.size(), from + kPerRequest); ++i) {
      keys.push_back(base_ + entries[i].first);
      values.push_back(entries[i].second);
    }
    for (;;) {
      const auto client = co_await usable_client();
      if (!holds(claim)) co_return false;
      try {
        co_await client->multi_set(keys, values);
        break;
      } catch (const std::exception& e) {
        request_failed(e);
      }
    }
  }
  co_return true;
}

asio::awaitable<std::vector<KeyEvent>> TcpJobStore::read_prefix(std::string prefix) {
  const std::string full_prefix = base_ + prefix;
  const auto turn = co_await requests_->lock();
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
  if (extra_watch_) extra_watch_->close();
  heartbeat_timer_.cancel();
  lease_timer_.cancel();  // a pending one would hold the agent's shutdown for a heartbeat timeout
  for (auto& connecting : connecting_) connecting.emit(boost::asio::cancellation_type::terminal);
  wake();
}

void TcpJobStore::leave() {
  if (broken_.empty()) lost("this agent left the job");
}

}  // namespace ddprun::rendezvous
