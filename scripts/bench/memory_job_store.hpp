#pragma once
// For rendezvous_sim beyond what descriptors allow: a JobStore over the store's own KeyValueStore
// in this process, without sockets. The keys, owned keys, claims and watches are the real store's
// (KeyValueStore); what goes is the transport: each request completes on the next turn of the
// event loop, and watch frames are decoded as they are delivered. Single-threaded: every store of
// a simulation shares one KeyValueStore on one io_context.
#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/job_store/job_store.hpp"
#include "ddprun/store/errors.hpp"
#include "ddprun/store/key_value_store.hpp"

namespace ddprun::bench {

using rendezvous::KeyEvent;
using rendezvous::WatchSet;
using store::KeyValueStore;

// What the transport would have carried, for the simulation's per-agent figures.
struct MemoryTraffic {
  uint64_t requests = 0;
  uint64_t bytes_sent = 0;  // watch frames and replies
};

class MemoryJobStore final : public rendezvous::JobStore,
                             public std::enable_shared_from_this<MemoryJobStore> {
 public:
  MemoryJobStore(boost::asio::any_io_executor ex, std::shared_ptr<KeyValueStore> kv,
                 std::string base, std::shared_ptr<MemoryTraffic> traffic)
      : ex_(ex),
        kv_(std::move(kv)),
        base_(std::move(base)),
        traffic_(std::move(traffic)),
        presence_(this),
        watcher_(this),
        wake_(ex, boost::asio::steady_timer::time_point::max()) {}
  ~MemoryJobStore() override { leave(); }

  boost::asio::awaitable<std::vector<KeyEvent>> join(std::string presence_key, std::string value,
                                                     WatchSet watched) override {
    co_await turn();
    kv_->set(base_ + presence_key, std::move(value), &presence_);
    std::vector<KeyEvent> snapshot;
    for (const auto& k : watched.keys) register_watch(store::wire::WatchMode::kKey, k, snapshot);
    for (const auto& p : watched.prefixes) {
      register_watch(store::wire::WatchMode::kPrefix, p, snapshot);
    }
    co_return snapshot;
  }

  boost::asio::awaitable<std::vector<KeyEvent>> watch_prefixes(
      std::vector<std::string> prefixes) override {
    co_await turn();
    std::vector<KeyEvent> snapshot;
    for (const auto& p : prefixes) {
      if (std::find(prefixes_.begin(), prefixes_.end(), p) != prefixes_.end()) continue;
      register_watch(store::wire::WatchMode::kPrefix, p, snapshot);
      prefixes_.push_back(p);
    }
    co_return snapshot;
  }

  boost::asio::awaitable<KeyEvent> next_event() override {
    const auto self = shared_from_this();
    for (;;) {
      if (left_) throw store::StoreConnectionError("this agent left the job");
      if (!pending_.empty()) {
        KeyEvent e = std::move(pending_.front());
        pending_.pop_front();
        co_return e;
      }
      co_await wake_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
  }

  boost::asio::awaitable<std::string> compare_set(std::string key, std::string expected,
                                                  std::string desired) override {
    co_await turn();
    std::string now = kv_->compare_set(base_ + key, expected, std::move(desired));
    traffic_->bytes_sent += 8 + now.size();
    co_return now;
  }

  boost::asio::awaitable<std::optional<std::string>> compare_set_holding(
      std::string claim, std::string key, std::string expected, std::string desired) override {
    co_await turn();
    if (!held(claim)) co_return std::nullopt;
    std::string now = kv_->compare_set(base_ + key, expected, std::move(desired));
    traffic_->bytes_sent += 8 + now.size();
    co_return now;
  }

  boost::asio::awaitable<void> set(std::string key, std::string value) override {
    co_await turn();
    kv_->set(base_ + key, std::move(value));
  }

  // The claim is held while the key holds this agent's value (a presence here never lapses).
  boost::asio::awaitable<bool> set_all_holding(
      std::string claim, std::vector<std::pair<std::string, std::string>> entries) override {
    co_await turn();
    if (!held(claim)) co_return false;
    for (auto& [k, v] : entries) kv_->set(base_ + k, std::move(v));
    co_return true;
  }

  boost::asio::awaitable<std::vector<KeyEvent>> read_prefix(std::string prefix) override {
    co_await turn();
    std::vector<KeyEvent> out;
    for (auto& [k, v] : kv_->with_prefix(base_ + prefix)) {
      traffic_->bytes_sent += 16 + k.size() + v.size();
      out.push_back(KeyEvent{k.substr(base_.size()), std::move(v), false});
    }
    co_return out;
  }

  // An in-memory store never restarts: every presence is its holder's.
  bool unconfirmed(const std::string&) const override { return false; }

  boost::asio::awaitable<std::string> claim(std::string key, std::string value) override {
    co_await turn();
    std::string now = kv_->compare_set(base_ + key, "", value, &presence_);
    traffic_->bytes_sent += 8 + now.size();
    if (now == value) claims_[key] = value;
    co_return now;
  }

  // As a dead agent's connections closing: its owned keys go, its watches end.
  void leave() override {
    if (left_) return;
    left_ = true;
    kv_->drop_peer(presence_);
    kv_->drop_peer(watcher_);
    wake_.cancel();
  }

 private:
  bool held(const std::string& claim) const {
    const auto mine = claims_.find(claim);
    const std::string* now = kv_->get(base_ + claim);
    return mine != claims_.end() && now != nullptr && *now == mine->second;
  }

  struct Peer final : store::StorePeer {
    explicit Peer(MemoryJobStore* s) : store(s) {}
    void deliver(std::string_view bytes) override { store->delivered(this, bytes); }
    MemoryJobStore* store;
  };

  // A request's round trip: its reply comes on a later turn of the loop.
  boost::asio::awaitable<void> turn() {
    if (left_) throw store::StoreConnectionError("this agent left the job");
    ++traffic_->requests;
    co_await boost::asio::post(ex_, boost::asio::use_awaitable);
    if (left_) throw store::StoreConnectionError("this agent left the job");
  }

  void register_watch(store::wire::WatchMode mode, const std::string& key,
                      std::vector<KeyEvent>& snapshot) {
    snapshot_ = &snapshot;
    kv_->watch(watcher_, mode, base_ + key, false);
    snapshot_ = nullptr;
  }

  static uint64_t read_u64(std::string_view& in) {
    uint64_t v = 0;
    std::memcpy(&v, in.data(), sizeof v);
    in.remove_prefix(sizeof v);
    return v;
  }
  static std::string read_bytes(std::string_view& in) {
    const uint64_t n = read_u64(in);
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  }

  void delivered(Peer* to, std::string_view bytes) {
    traffic_->bytes_sent += bytes.size();
    if (to != &watcher_) return;
    using store::wire::WatchEvent;
    while (!bytes.empty()) {
      const auto event = static_cast<WatchEvent>(bytes.front());
      bytes.remove_prefix(1);
      std::string key = read_bytes(bytes);
      read_bytes(bytes);  // the old value
      std::string value = read_bytes(bytes);
      if (event == WatchEvent::kRegistered || !key.starts_with(base_)) continue;
      KeyEvent e{key.substr(base_.size()), std::move(value), event == WatchEvent::kKeyDeleted};
      if (e.deleted) e.value.clear();
      if (event == WatchEvent::kExisting) {
        if (snapshot_ != nullptr) snapshot_->push_back(std::move(e));
      } else {
        pending_.push_back(std::move(e));
        wake_.cancel();
      }
    }
  }

  boost::asio::any_io_executor ex_;
  std::shared_ptr<KeyValueStore> kv_;
  std::string base_;
  std::shared_ptr<MemoryTraffic> traffic_;
  Peer presence_;  // owns the presence key and claims
  Peer watcher_;   // receives the watch frames
  boost::asio::steady_timer wake_;
  std::deque<KeyEvent> pending_;
  std::vector<KeyEvent>* snapshot_ = nullptr;
  std::vector<std::string> prefixes_;
  std::map<std::string, std::string> claims_;  // the claims this agent took, with its values
  bool left_ = false;
};

}  // namespace ddprun::bench
