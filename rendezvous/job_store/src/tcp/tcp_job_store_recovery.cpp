// TcpJobStore's outage recovery: when a connection to the store breaks, the store is reached
// again (bounded tries, each short enough to tell a store that is down for everyone from one this
// node is cut off from), this node's lease is watched meanwhile, and on reconnection its keys and
// watches are restored and the events missed are caught up from what the store holds now.
#include <algorithm>
#include <exception>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "cancellable.hpp"
#include "ddprun/job_store/tcp_job_store.hpp"
#include "ddprun/store/async_mutex.hpp"
#include "ddprun/store/errors.hpp"
#include "ddprun/store/store_watch.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using Ms = std::chrono::milliseconds;

namespace {

// Raising a restored counter loses to others raising it at most this many times in a row.
constexpr int kCounterRaises = 16;

// Whether `mine` and `there` are both decimal counters and `mine` is the larger.
bool newer_count(const std::string& mine, const std::string& there) {
  const auto decimal = [](const std::string& s) {
    return !s.empty() && s.size() < 19 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return decimal(mine) && decimal(there) && std::stoll(mine) > std::stoll(there);
}

// One try at reaching the store during an outage: short, so that whether it refuses connections
// (down for everyone) or does not answer (cut off) is known well within a heartbeat timeout.
constexpr Ms kReconnectTry{250};

double in_seconds(Ms d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

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
  if (extra_watch_) extra_watch_->close();
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
  lease_timer_.expires_at(lease_start_ + spec_.heartbeat_timeout);
  co_await lease_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
  if (outage != outage_ || !reconnecting_ || !broken_.empty()) co_return;
  if (refused_) {
    spdlog::warn(
        "the rendezvous store at {} is down (connection refused) for every node: the workers keep "
        "running while it is waited for (rdzv_conf reconnect_timeout={:g} s)",
        endpoint(), in_seconds(spec_.reconnect_timeout));
    co_return;
  }
  report_expelled(fmt::format("the store has not been reached for the heartbeat timeout of {:g} s",
                              in_seconds(spec_.heartbeat_timeout)));
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
          endpoint(), in_seconds(limit),
          server_.in_agent ? " (the heartbeat timeout; the store lived in an agent)"
                           : " (rdzv_conf reconnect_timeout)",
          last_error_));
      co_return;
    }
    // A try's connections and requests end at once when the job store is lost meanwhile (the
    // agent stops): a store that accepts but no longer answers (its agent exiting) would hold
    // them, and the agent's shutdown, for the heartbeat timeout.
    bool reconnected = false;
    try {
      reconnected = co_await cancellable(ex_, connecting_, try_reconnect(outage, deadline));
    } catch (const boost::system::system_error&) {
      co_return;  // lost() cancelled it
    }
    if (reconnected) co_return;
    if (refused_ && server_.in_agent && broken_.empty()) {
      lost(fmt::format(
          "the rendezvous store at {} is gone (connection refused): it lived in another node's "
          "agent, which has stopped",
          endpoint()));
      co_return;
    }
  }
}

// The store restarted and lost every key: the job's are put back (the first agent back does it,
// the rest agree). Returns how many.
asio::awaitable<size_t> TcpJobStore::put_back_keys(store::AsyncStoreClient& client) {
  const std::map<std::string, std::string> keys = known_;
  size_t restored = 0;
  for (const auto& [key, value] : keys) {
    if (is_presence_key(key) || claimable_.contains(key)) continue;
    const std::string full_key = base_ + key;
    std::string now = co_await client.compare_set(full_key, "", value);
    // A counter (the round, the restarts spent) never goes back: a node cut off before the
    // store restarted may have put back an older one first (chaos seed 120513: two rounds 1).
    for (int tries = 0; tries < kCounterRaises && now != value && newer_count(value, now);
         ++tries) {
      now = co_await client.compare_set(full_key, now, value);
    }
    ++restored;
  }
  co_return restored;
}

// This node's presence made again on a new connection (options `o`), and its `claims`, which
// went with the old presence (or the store), made again where nobody took them (those taken are
// removed from `claims`).
asio::awaitable<std::shared_ptr<store::AsyncStoreClient>> TcpJobStore::present_again(
    const store::ClientOptions& o, std::map<std::string, std::string>& claims) {
  auto presence = co_await store::AsyncStoreClient::connect(ex_, spec_.host,
                                                            static_cast<uint16_t>(spec_.port), o);
  std::exception_ptr failed;
  try {
    co_await presence->keepalive(spec_.heartbeat_timeout);
    const std::string full_key = base_ + presence_key_;
    co_await presence->set_owned(full_key, presence_value_);
    for (auto it = claims.begin(); it != claims.end();) {
      const std::string claimed_key = base_ + it->first;
      const std::string now = co_await claim_on(*presence, claimed_key, it->second);
      it = now == it->second ? std::next(it) : claims.erase(it);
    }
    co_await presence->ping(0);
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {
    presence->close();  // its keepalive would hold the old presence's lease
    std::rethrow_exception(failed);
  }
  co_return presence;
}

asio::awaitable<bool> TcpJobStore::try_reconnect(uint64_t outage, Clock::time_point deadline) {
  store::ClientOptions o = client_options();
  o.timeout = std::min<Ms>(kReconnectTry, std::chrono::duration_cast<Ms>(std::max(
                                              deadline - Clock::now(), Clock::duration(0))));
  const auto port = static_cast<uint16_t>(spec_.port);
  std::shared_ptr<store::AsyncStoreClient> probe, client, presence;
  std::shared_ptr<store::AsyncStoreWatch> watch, extra_watch;
  std::map<std::string, std::string> now_there;
  std::map<std::string, std::string> claims = claims_;
  store::ServerInfo info;
  bool restarted = false;
  size_t restored = 0;
  try {
    probe = co_await store::AsyncStoreClient::connect(ex_, spec_.host, port, o);
    info = co_await probe->server_info();
    probe->close();
    restarted = info.instance != server_.instance;
    o.timeout = std::max<Ms>(spec_.heartbeat_timeout, Ms(1000));  // the store answers: let it work
    client = co_await store::AsyncStoreClient::connect(ex_, spec_.host, port, o);
    if (restarted) restored = co_await put_back_keys(*client);
    // A presence not heard from for the heartbeat timeout (no heartbeats go out meanwhile) is
    // gone at the store, with its claims, though its connection may still stand.
    const bool lapsed = Clock::now() - lease_start_ >= spec_.heartbeat_timeout;
    if (restarted || !presence_ok_ || lapsed) presence = co_await present_again(o, claims);
    watch = co_await open_watch(o, watched_.keys, watched_.prefixes, now_there);
    if (!extra_prefixes_.empty()) {
      const std::vector<std::string> no_keys;
      extra_watch = co_await open_watch(o, no_keys, extra_prefixes_, now_there);
    }
  } catch (const store::StoreRefused& e) {
    refused_ = true;
    last_error_ = e.what();
  } catch (const std::exception& e) {
    refused_ = false;
    last_error_ = e.what();
  }
  const bool complete = watch && (extra_prefixes_.empty() || extra_watch);
  if (!complete || !broken_.empty() || outage != outage_) {
    if (probe) probe->close();
    if (client) client->close();
    if (presence) presence->close();
    if (watch) watch->close();
    if (extra_watch) extra_watch->close();
    co_return false;
  }
  Reconnection r;
  r.client = std::move(client);
  r.presence = std::move(presence);
  r.watch = std::move(watch);
  r.extra_watch = std::move(extra_watch);
  r.claims = std::move(claims);
  r.now_there = std::move(now_there);
  r.info = info;
  r.restarted = restarted;
  r.restored = restored;
  resume(std::move(r));
  co_return true;
}

void TcpJobStore::catch_up(const std::map<std::string, std::string>& now_there,
                           const std::function<bool(const std::string&)>& in_scope,
                           bool restarted) {
  const auto now = Clock::now();
  for (const auto& [key, value] : now_there) {
    withheld_.erase(key);
    if (auto it = known_.find(key); it == known_.end() || it->second != value) {
      queue(KeyEvent{key, value, false});
    }
  }
  std::vector<std::string> gone;
  for (const auto& [key, _] : known_) {
    if (in_scope(key) && !now_there.contains(key)) gone.push_back(key);
  }
  for (const auto& key : gone) {
    // After a restart, a peer's presence and a claim held elsewhere get their holder's time to
    // come back.
    const bool held_elsewhere = (is_presence_key(key) && key != presence_key_) ||
                                (claimable_.contains(key) && !claims_.contains(key));
    if (restarted && held_elsewhere) {
      withheld_[key] = now + spec_.heartbeat_timeout;
    } else {
      queue(KeyEvent{key, "", true});
    }
  }
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
  if (r.presence) {
    if (presence_) presence_->close();  // (its keepalive would hold the old presence's lease)
    presence_ = std::move(r.presence);
    claims_ = std::move(r.claims);
    lease_start_ = now;
  }
  client_ = std::move(r.client);
  watch_ = std::move(r.watch);
  extra_watch_ = std::move(r.extra_watch);
  server_ = r.info;
  presence_ok_ = true;
  catch_up(
      r.now_there, [](const std::string&) { return true; }, r.restarted);
  asio::co_spawn(ex_, read_events(watch_), asio::detached);
  if (extra_watch_) asio::co_spawn(ex_, read_events(extra_watch_), asio::detached);
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
  lease_timer_.cancel();  // the outage is over
  wake();
}

}  // namespace ddprun::rendezvous
