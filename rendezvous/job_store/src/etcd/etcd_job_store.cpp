#include "ddprun/job_store/etcd_job_store.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/store/async_mutex.hpp"
#include "ddprun/store/errors.hpp"
#include "etcd_client.hpp"
#include "etcd_leadership.hpp"
#include "etcd_login.hpp"
#include "etcd_watch_check.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using etcd::base64_decode;
using etcd::base64_encode;
using etcd::Clock;
using etcd::int_field;
using nlohmann::json;

namespace {

// One try on one member: long enough for a leader election, short enough to leave a silent member
// well within the heartbeat timeout.
std::chrono::milliseconds attempt_timeout(std::chrono::milliseconds heartbeat) {
  return std::max<std::chrono::milliseconds>(heartbeat / 3, std::chrono::milliseconds(500));
}

// Puts `key` = `value` (on `lease` unless it is empty) if the key holds `expected`, or, with
// `expected` empty, if it is absent; else reads it. Keys and values base64, `expected` raw.
// (Outside the coroutines: g++ 12 miscompiles braced initializer lists inside one.)
json compare_and_put_txn(const std::string& key, const std::string& expected,
                         const std::string& value, const std::string& lease) {
  json compare;
  compare["key"] = key;
  compare["result"] = "EQUAL";
  if (expected.empty()) {
    compare["target"] = "CREATE";
    compare["create_revision"] = "0";  // the key does not exist
  } else {
    compare["target"] = "VALUE";
    compare["value"] = base64_encode(expected);
  }
  json put;
  put["key"] = key;
  put["value"] = value;
  if (!lease.empty()) put["lease"] = lease;
  json get;
  get["key"] = key;
  json txn;
  txn["compare"] = json::array({compare});
  txn["success"] = json::array({json{{"request_put", put}}});
  txn["failure"] = json::array({json{{"request_range", get}}});
  return txn;
}

// The value the `at`th range of a failed transaction read, if the key was there.
std::optional<std::string> value_read(const json& reply, size_t at = 0) {
  const json responses = reply.value("responses", json::array());
  if (responses.size() <= at) return std::nullopt;
  const json kvs =
      responses[at].value("response_range", json::object()).value("kvs", json::array());
  if (kvs.empty()) return std::nullopt;
  return base64_decode(kvs[0].value("value", ""));
}

// The revision in a reply's header; 0 where it has none that reads as one.
int64_t revision_in(const json& reply) {
  try {
    return int_field(reply.value("header", json::object()), "revision");
  } catch (const std::exception&) {
    return 0;
  }
}

// The condition that `key` holds `value` (both raw).
json holds_value(const std::string& key, const std::string& value) {
  json compare;
  compare["key"] = base64_encode(key);
  compare["result"] = "EQUAL";
  compare["target"] = "VALUE";
  compare["value"] = base64_encode(value);
  return compare;
}

// One transaction of puts (keys and values base64), made only if `key` holds `value` (both raw).
json puts_txn_if(const std::string& key, const std::string& value,
                 const std::vector<std::pair<std::string, std::string>>& entries, size_t from,
                 size_t to) {
  json txn;
  txn["compare"] = json::array({holds_value(key, value)});
  txn["success"] = json::array();
  for (size_t i = from; i < to; ++i) {
    json put;
    put["key"] = entries[i].first;
    put["value"] = entries[i].second;
    json op;
    op["request_put"] = std::move(put);
    txn["success"].push_back(std::move(op));
  }
  return txn;
}

}  // namespace

EtcdJobStore::EtcdJobStore(asio::any_io_executor ex, EtcdJobStoreSpec spec)
    : ex_(ex),
      spec_(std::move(spec)),
      base_(spec_.prefix + spec_.run_id + "/"),
      tls_(store::client_tls_context(spec_.tls)),
      login_(spec_.login ? std::make_shared<etcd::Login>(ex, spec_.endpoints,
                                                         attempt_timeout(spec_.heartbeat_timeout),
                                                         tls_, *spec_.login)
                         : nullptr),
      client_(std::make_unique<etcd::Client>(
          ex, spec_.endpoints, attempt_timeout(spec_.heartbeat_timeout), tls_, login_)),
      client_turn_(std::make_unique<store::AsyncMutex>(ex)),
      lease_client_(std::make_unique<etcd::Client>(
          ex, spec_.endpoints, attempt_timeout(spec_.heartbeat_timeout), tls_, login_)),
      watch_(std::make_unique<etcd::WatchStream>(ex, spec_.endpoints, tls_, login_)),
      leadership_(std::make_unique<etcd::LeadershipProbe>(ex, spec_.endpoints, tls_)),
      keep_alive_timer_(ex),
      watch_check_(std::make_unique<etcd::WatchCheck>(spec_.heartbeat_timeout)) {}

EtcdJobStore::~EtcdJobStore() = default;

void EtcdJobStore::check_open() const {
  if (!broken_.empty()) throw store::StoreConnectionError(broken_);
}

Clock::time_point EtcdJobStore::request_deadline() const {
  // Requests ride out an election or a lost member; losing the lease (keep_alive) ends them sooner.
  return Clock::now() +
         std::max<std::chrono::milliseconds>(spec_.join_timeout, spec_.heartbeat_timeout);
}

asio::awaitable<json> EtcdJobStore::call(std::string path, json body, Clock::time_point deadline) {
  const auto turn = co_await client_turn_->lock();
  std::string failed;
  try {
    co_return co_await client_->call(path, body, deadline);
  } catch (const store::StoreConnectionError& e) {
    failed = e.what();
  }
  // A call cut short because the store was lost (the lease, or leave()) says why it was lost.
  throw store::StoreConnectionError(broken_.empty() ? failed : broken_);
}

asio::awaitable<void> EtcdJobStore::grant_lease(etcd::Client& client, Clock::time_point deadline) {
  const auto ttl_s = static_cast<int64_t>(
      std::max(1.0, std::ceil(std::chrono::duration<double>(spec_.heartbeat_timeout).count())));
  json grant;
  grant["TTL"] = std::to_string(ttl_s);
  const auto sent = Clock::now();
  const json granted = co_await client.call("/v3/lease/grant", grant, deadline);
  const std::string lease = granted.value("ID", std::string());
  const int64_t ttl = int_field(granted, "TTL");
  if (lease.empty() || ttl <= 0) {
    throw store::StoreError(fmt::format("etcd granted no lease: {}", granted.dump()));
  }
  lease_ = lease;
  lease_ttl_ = std::chrono::seconds(ttl);
  lease_expiry_ = sent + lease_ttl_;
}

asio::awaitable<void> EtcdJobStore::put_presence(etcd::Client& client, Clock::time_point deadline) {
  json put;
  put["key"] = base64_encode(base_ + presence_key_);
  put["value"] = base64_encode(presence_value_);
  put["lease"] = lease_;
  co_await client.call("/v3/kv/put", put, deadline);
}

bool EtcdJobStore::follows(const std::string& key) const {
  if (std::find(watched_.keys.begin(), watched_.keys.end(), key) != watched_.keys.end()) {
    return true;
  }
  return std::any_of(watched_.prefixes.begin(), watched_.prefixes.end(),
                     [&](const std::string& p) { return key.starts_with(p); });
}

asio::awaitable<std::vector<KeyEvent>> EtcdJobStore::join(std::string presence_key,
                                                          std::string value, WatchSet watched) {
  const auto deadline = Clock::now() + spec_.join_timeout;
  presence_key_ = presence_key;
  presence_value_ = value;
  watched_ = std::move(watched);
  std::string failed;
  try {
    const auto turn = co_await client_turn_->lock();
    co_await grant_lease(*client_, deadline);
    co_await put_presence(*client_, deadline);
    try {
      co_await leadership_->learn_members(*client_, deadline);
    } catch (const std::exception& e) {
      spdlog::debug("etcd member list: {} (the endpoints are taken for the cluster)", e.what());
    }
  } catch (const store::StoreConnectionError& e) {
    failed = broken_.empty() ? e.what() : broken_;
  }
  if (!failed.empty()) throw store::StoreConnectionError(failed);

  json range;
  range["key"] = base64_encode(base_);
  range["range_end"] = base64_encode(etcd::prefix_end(base_));
  const json snapshot = co_await call("/v3/kv/range", range, deadline);
  revision_ = int_field(snapshot.value("header", json::object()), "revision");
  std::vector<KeyEvent> out;
  for (const auto& kv : snapshot.value("kvs", json::array())) {
    const std::string key = base64_decode(kv.value("key", "")).substr(base_.size());
    std::string v = base64_decode(kv.value("value", ""));
    mirror_[key] = v;
    if (follows(key)) out.push_back(KeyEvent{key, std::move(v), false});
  }
  co_await watch_->open(base_, etcd::prefix_end(base_), revision_ + 1, deadline);
  asio::co_spawn(ex_, keep_alive(), asio::detached);
  co_return out;
}

asio::awaitable<void> EtcdJobStore::keep_alive() {
  const auto self = shared_from_this();  // the object outlives this coroutine
  const auto interval = spec_.heartbeat_timeout / 3;
  // Since when every member has been down (refusing connections): nobody can change the job then,
  // so this node's workers wait for etcd, within the reconnect timeout.
  std::optional<Clock::time_point> down_since;
  // After an answered renewal: a third of the heartbeat after it was sent, however long the check
  // of the watch after it took.
  std::optional<Clock::time_point> next_renewal;
  while (broken_.empty()) {
    // (At the lease's end at the latest: a renewal that was answered too late counts for nothing.)
    const auto at = std::exchange(next_renewal, std::nullopt).value_or(Clock::now() + interval);
    keep_alive_timer_.expires_at(down_since ? Clock::now() + interval
                                            : std::min(at, lease_expiry_));
    co_await keep_alive_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!broken_.empty()) break;
    // Renewed through the member that holds this node's watch when it can be: a member that no
    // longer answers (stopped, or cut off from its peers) keeps a watch open and silent, so the
    // watch moves with the keep-alive. Tried across members until the lease would run out: etcd
    // counts a renewal's TTL from when it gets it, which is after it was sent, so a lease this
    // node could not renew in time may be gone, and its workers are stale (after a pause, too).
    const size_t watch_member = watch_->member();
    lease_client_->prefer(watch_member);
    const auto sent = Clock::now();
    const bool tried = sent < lease_expiry_ || down_since;
    const auto give_up = down_since ? sent + interval : lease_expiry_;
    const bool waiting_for_etcd = down_since.has_value();
    Renewal renewal;
    if (tried) renewal = co_await renew(give_up, waiting_for_etcd);
    if (!broken_.empty()) break;
    const int64_t ttl = renewal.ttl;
    const bool answered = renewal.answered;
    if (ttl > 0) {
      lease_expiry_ = renewal.sent + std::chrono::seconds(ttl);
      next_renewal = renewal.sent + interval;
      if (down_since) spdlog::warn("etcd is back; this node's lease held");
      down_since.reset();
      if (lease_client_->member() != watch_member) {
        const EtcdEndpoint& e = spec_.endpoints[watch_member];
        spdlog::warn("etcd member {}:{} did not answer in time; moving this node's watch off it",
                     e.host, e.port);
        move_watch();
      } else {
        co_await check_watch(renewal.revision);
      }
      continue;
    }
    if (tried && !answered && lease_client_->members_down()) {
      if (!down_since) {
        down_since = sent;
        spdlog::warn(
            "every etcd member refuses connections, for every node: the workers keep running while "
            "etcd is waited for (rdzv_conf reconnect_timeout={:g} s)",
            std::chrono::duration<double>(spec_.reconnect_timeout).count());
      }
      if (Clock::now() < *down_since + spec_.reconnect_timeout) continue;
      lost(fmt::format(
          "lost the rendezvous store: etcd is unreachable: every member refused connections for "
          "rdzv_conf reconnect_timeout={:g} s",
          std::chrono::duration<double>(spec_.reconnect_timeout).count()));
      break;
    }
    down_since.reset();
    // The gateway answers 200 without a TTL for a lease it no longer has.
    co_await rejoin(answered ? "etcd dropped this node's lease"
                             : "this node's etcd lease ran out before it could be renewed");
  }
}

asio::awaitable<EtcdJobStore::Renewal> EtcdJobStore::renew(Clock::time_point give_up,
                                                           bool waiting_for_etcd) {
  Renewal out;
  json body;
  body["ID"] = lease_;
  // The lease's last stretch is kept for asking the members whether they have a live leader:
  // while a majority has none (an election), the lease cannot run out, and the next leader renews
  // it for its TTL, so the renewals go on that long from the asking.
  const auto asking = attempt_timeout(spec_.heartbeat_timeout);
  bool last_try = false;
  bool said = false;
  for (;;) {
    const auto try_until = waiting_for_etcd || last_try ? give_up : give_up - asking;
    out.sent = Clock::now();
    if (out.sent < try_until) {
      try {
        const json reply = co_await lease_client_->call("/v3/lease/keepalive", body, try_until);
        const json result = reply.value("result", json::object());
        out.ttl = int_field(result, "TTL");
        out.revision = revision_in(result);
        out.answered = true;
        co_return out;
      } catch (const std::exception& e) {
        if (!broken_.empty()) co_return out;
        spdlog::debug("etcd lease keep-alive: {}", e.what());
        if (waiting_for_etcd || lease_client_->members_down()) co_return out;
      }
    }
    const auto asked = Clock::now();
    if (waiting_for_etcd || last_try || asked >= give_up) co_return out;
    const bool electing = co_await leadership_->no_live_leader(give_up);
    if (!broken_.empty()) co_return out;
    if (!electing || asked + lease_ttl_ <= give_up) {
      last_try = true;
      continue;
    }
    if (!std::exchange(said, true)) {
      spdlog::info(
          "etcd has no live leader (an election): this node's lease cannot run out meanwhile; its "
          "renewals go on");
    }
    give_up = asked + lease_ttl_;
  }
}

void EtcdJobStore::move_watch() {
  watch_check_->reset();
  watch_->drop_member();
}

asio::awaitable<void> EtcdJobStore::check_watch(int64_t member_revision) {
  if (reopen_by_) {
    watch_check_->reset();
    co_return;
  }
  switch (watch_check_->renewed(member_revision, revision_, Clock::now())) {
    case etcd::WatchCheck::Next::kNothing:
      co_return;
    case etcd::WatchCheck::Next::kMove: {
      const etcd::WatchCheck::Lag& lag = *watch_check_->lag();
      const EtcdEndpoint& e = spec_.endpoints[watch_->member()];
      spdlog::warn(
          "etcd member {}:{} has not brought the job's changes through this node's watch for "
          "{:.1f} s (etcd had {} job keys, the newest of revision {}; the watch has brought {}, "
          "up to revision {}); moving this node's watch off it",
          e.host, e.port, std::chrono::duration<double>(Clock::now() - lag.since).count(), lag.keys,
          lag.newest, mirror_.size(), revision_);
      move_watch();
      co_return;
    }
    case etcd::WatchCheck::Next::kRange:
      break;
  }
  // The job's newest key by revision, and how many there are (a deletion leaves no key to date).
  json range;
  range["key"] = base64_encode(base_);
  range["range_end"] = base64_encode(etcd::prefix_end(base_));
  range["limit"] = "1";
  range["sort_order"] = "DESCEND";
  range["sort_target"] = "MOD";
  range["keys_only"] = true;
  int64_t newest = 0;
  int64_t keys = 0;
  int64_t as_of = 0;
  const auto bound = spec_.heartbeat_timeout / 6;  // half the renewals' interval
  try {
    const json reply = co_await lease_client_->call("/v3/kv/range", range, Clock::now() + bound);
    const json kvs = reply.value("kvs", json::array());
    newest = kvs.empty() ? 0 : int_field(kvs[0], "mod_revision");
    keys = int_field(reply, "count");
    as_of = revision_in(reply);
  } catch (const std::exception& e) {
    watch_check_->failed(Clock::now());
    if (std::exchange(range_failure_said_, true)) {
      spdlog::debug("etcd range of the job's newest key: {}", e.what());
    } else {
      spdlog::info(
          "etcd did not answer a range of the job's newest key within {} ms ({}): this node's "
          "watch is checked again {:.1f} s from now, and so on",
          bound.count(), e.what(),
          std::chrono::duration<double>(watch_check_->range_pause()).count());
    }
    co_return;
  }
  if (!broken_.empty() || reopen_by_) co_return;
  watch_check_->found(newest, keys, as_of, revision_, static_cast<int64_t>(mirror_.size()),
                      Clock::now());
}

asio::awaitable<void> EtcdJobStore::rejoin(std::string why) {
  spdlog::warn(
      "{} (it was paused, or cut off from etcd, for longer than the heartbeat timeout): its peers "
      "go "
      "on without it; its workers are stopped and it rejoins the job as a new node",
      why);
  // The session learns it now, not when the watch brings the key's deletion (later, or never from
  // a member that stopped answering).
  if (mirror_.erase(presence_key_) > 0 && follows(presence_key_)) {
    pending_.push_back(KeyEvent{presence_key_, "", true});
    move_watch();
  }
  // The old lease is revoked, so that its keys (presence, claims) go for every peer too, even when
  // it is still alive; then the presence comes back on a new one. The new lease comes first: a
  // claim made on hearing the old one's keys go (the leader's) is made on it.
  const auto deadline = Clock::now() + spec_.reconnect_timeout;
  json old;
  old["ID"] = lease_;
  std::string failure;
  for (bool revoked = false; failure.empty();) {
    try {
      co_await grant_lease(*lease_client_, deadline);
      if (!revoked) {
        try {
          co_await lease_client_->call("/v3/lease/revoke", old, deadline);
        } catch (const store::StoreConnectionError&) {
          throw;
        } catch (const store::StoreError& e) {
          spdlog::debug("etcd lease revoke: {}", e.what());  // not found: it is gone already
        }
        revoked = true;
      }
      co_await put_presence(*lease_client_, deadline);
      break;
    } catch (const store::StoreConnectionError& e) {
      failure = e.what();
    } catch (const store::StoreError& e) {
      // The new lease ran out before the presence was on it (a slow revoke): another one.
      if (Clock::now() >= deadline) failure = e.what();
    }
  }
  if (!failure.empty() && broken_.empty()) {
    lost(fmt::format("lost the rendezvous store: could not rejoin within {:g} s: {}",
                     std::chrono::duration<double>(spec_.reconnect_timeout).count(), failure));
  }
}

asio::awaitable<KeyEvent> EtcdJobStore::next_event() {
  for (;;) {
    check_open();
    if (!pending_.empty()) {
      KeyEvent e = std::move(pending_.front());
      pending_.pop_front();
      co_return e;
    }
    if (reopen_by_) {
      // One short try at a time, so that events queued meanwhile (a lapsed lease) are not held up
      // by a silent member. Bounded as a rejoin is (the lease, not the watch, keeps a
      // node that cannot hear out of later rounds). When the store is lost meanwhile, that is the
      // reason to give, not the watch.
      std::string failed;
      try {
        co_await watch_->open(
            base_, etcd::prefix_end(base_), revision_ + 1,
            std::min(*reopen_by_, Clock::now() + attempt_timeout(spec_.heartbeat_timeout)));
        reopen_by_.reset();
      } catch (const store::StoreConnectionError& e) {
        if (!broken_.empty() || Clock::now() >= *reopen_by_)
          failed = broken_.empty() ? e.what() : broken_;
      }
      if (!failed.empty()) throw store::StoreConnectionError(failed);
      continue;
    }
    try {
      const json result = co_await watch_->next();
      for (const auto& ev : result.value("events", json::array())) {
        const json& kv = ev.at("kv");
        const std::string key = base64_decode(kv.value("key", ""));
        revision_ = std::max(revision_, int_field(kv, "mod_revision"));
        if (!key.starts_with(base_)) continue;
        KeyEvent out;
        out.key = key.substr(base_.size());
        out.deleted = ev.value("type", std::string("PUT")) == "DELETE";
        if (out.deleted) {
          mirror_.erase(out.key);
        } else {
          out.value = base64_decode(kv.value("value", ""));
          mirror_[out.key] = out.value;
        }
        if (follows(out.key)) pending_.push_back(std::move(out));
      }
    } catch (const store::StoreConnectionError& e) {
      if (!broken_.empty()) throw store::StoreConnectionError(broken_);
      spdlog::warn("etcd watch lost ({}); resuming it from revision {} on another member", e.what(),
                   revision_ + 1);
      reopen_by_ = Clock::now() + spec_.reconnect_timeout;
    }
  }
}

asio::awaitable<std::vector<KeyEvent>> EtcdJobStore::watch_prefixes(
    std::vector<std::string> prefixes) {
  check_open();
  std::vector<KeyEvent> out;
  for (const auto& prefix : prefixes) {
    if (std::find(watched_.prefixes.begin(), watched_.prefixes.end(), prefix) !=
        watched_.prefixes.end()) {
      continue;
    }
    // Keys followed already (an exact key under the prefix) are not reported again.
    for (auto it = mirror_.lower_bound(prefix);
         it != mirror_.end() && it->first.starts_with(prefix); ++it) {
      if (!follows(it->first)) out.push_back(KeyEvent{it->first, it->second, false});
    }
    watched_.prefixes.push_back(prefix);
  }
  // The mirror is where the stream stands: its later events for these keys come through
  // next_event(), now that they are followed.
  co_return out;
}

asio::awaitable<std::string> EtcdJobStore::claim(std::string key, std::string value) {
  check_open();
  const std::string none;
  const json txn =
      compare_and_put_txn(base64_encode(base_ + key), none, base64_encode(value), lease_);
  const json reply = co_await call("/v3/kv/txn", txn, request_deadline());
  const std::string now =
      reply.value("succeeded", false) ? value : value_read(reply).value_or(std::string());
  if (now == value) claims_[key] = value;  // (held already: asked again after the key's event)
  co_return now;                           // deleted meanwhile: not held
}

asio::awaitable<std::string> EtcdJobStore::compare_set(std::string key, std::string expected,
                                                       std::string desired) {
  check_open();
  const std::string no_lease;
  const json txn =
      compare_and_put_txn(base64_encode(base_ + key), expected, base64_encode(desired), no_lease);
  const json reply = co_await call("/v3/kv/txn", txn, request_deadline());
  if (reply.value("succeeded", false)) co_return desired;
  // torch's rules: the current value, or `expected` itself when the key is missing.
  co_return value_read(reply).value_or(expected);
}

asio::awaitable<std::optional<std::string>> EtcdJobStore::compare_set_holding(std::string claim,
                                                                              std::string key,
                                                                              std::string expected,
                                                                              std::string desired) {
  check_open();
  const auto held = claims_.find(claim);
  if (held == claims_.end()) co_return std::nullopt;
  const std::string holder = held->second;
  const std::string no_lease;
  json txn =
      compare_and_put_txn(base64_encode(base_ + key), expected, base64_encode(desired), no_lease);
  txn["compare"].push_back(holds_value(base_ + claim, holder));
  json claim_range;
  claim_range["key"] = base64_encode(base_ + claim);
  json read_claim;
  read_claim["request_range"] = claim_range;
  txn["failure"].push_back(read_claim);
  const json reply = co_await call("/v3/kv/txn", txn, request_deadline());
  if (reply.value("succeeded", false)) co_return desired;
  if (value_read(reply, 1) != holder) co_return std::nullopt;
  co_return value_read(reply).value_or(expected);  // as compare_set()
}

asio::awaitable<void> EtcdJobStore::set(std::string key, std::string value) {
  check_open();
  json put;
  put["key"] = base64_encode(base_ + key);
  put["value"] = base64_encode(value);
  co_await call("/v3/kv/put", put, request_deadline());
}

asio::awaitable<bool> EtcdJobStore::set_all_holding(
    std::string claim, std::vector<std::pair<std::string, std::string>> entries) {
  check_open();
  const auto held = claims_.find(claim);
  if (held == claims_.end()) co_return false;
  const std::string holder = held->second;
  constexpr size_t kPerTxn = 128;  // etcd's default --max-txn-ops
  for (auto& [k, v] : entries) {
    k = base64_encode(base_ + k);
    v = base64_encode(v);
  }
  for (size_t from = 0; from < entries.size(); from += kPerTxn) {
    const json txn =
        puts_txn_if(base_ + claim, holder, entries, from, std::min(entries.size(), from + kPerTxn));
    const json reply = co_await call("/v3/kv/txn", txn, request_deadline());
    if (!reply.value("succeeded", false)) co_return false;
  }
  co_return true;
}

asio::awaitable<std::vector<KeyEvent>> EtcdJobStore::read_prefix(std::string prefix) {
  check_open();
  const std::string full = base_ + prefix;
  json range;
  range["key"] = base64_encode(full);
  range["range_end"] = base64_encode(etcd::prefix_end(full));
  const json reply = co_await call("/v3/kv/range", range, request_deadline());
  std::vector<KeyEvent> out;
  for (const auto& kv : reply.value("kvs", json::array())) {
    out.push_back(KeyEvent{base64_decode(kv.value("key", "")).substr(base_.size()),
                           base64_decode(kv.value("value", "")), false});
  }
  co_return out;  // etcd returns a range in key order
}

void EtcdJobStore::lost(std::string why) {
  broken_ = std::move(why);
  client_->close();
  lease_client_->close();
  watch_->close();
  keep_alive_timer_.cancel();
}

asio::awaitable<void> EtcdJobStore::revoke(std::string lease) {
  const auto self = shared_from_this();
  etcd::Client client(ex_, spec_.endpoints, std::chrono::milliseconds(500), tls_);
  json body;
  body["ID"] = lease;
  try {
    co_await client.call("/v3/lease/revoke", body, Clock::now() + std::chrono::seconds(2));
  } catch (const std::exception& e) {
    spdlog::debug("etcd lease revoke: {}", e.what());  // it expires after its TTL anyway
  }
}

void EtcdJobStore::leave() {
  if (!broken_.empty()) return;
  lost("this agent left the job");
  if (!lease_.empty()) asio::co_spawn(ex_, revoke(lease_), asio::detached);
}

}  // namespace ddprun::rendezvous
