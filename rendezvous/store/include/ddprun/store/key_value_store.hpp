#pragma once
// The store's data and its semantics, free of any I/O: torch's TCPStore operations plus ddprun's
// connection-bound keys and watches. One instance lives in a StoreServer; it is not thread-safe.
//
// Clients are represented by StorePeer: the store hands a peer the raw reply bytes it owes it
// asynchronously (a finished WAIT or BARRIER, a watch frame). Synchronous replies are the caller's
// job.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ddprun/store/wire_protocol.hpp"

namespace ddprun::store {

class StorePeer {
 public:
  // Queues bytes for the peer; must not call back into the store.
  virtual void deliver(std::string_view bytes) = 0;

 protected:
  ~StorePeer() = default;
};

class KeyValueStore {
 public:
  // Values are immutable once stored, so a reply can send one by reference, without a copy.
  using Value = std::shared_ptr<const std::string>;

  // Stores `value`. With `owner`, the key is bound to that peer (see wire_protocol.hpp SET_OWNED);
  // without, the key is permanent.
  void set(const std::string& key, std::string value, StorePeer* owner = nullptr);
  // torch's rules: a missing key is created only when `expected` is empty; the reply is the value
  // after the operation, or `expected` itself when the key is missing and `expected` is not empty.
  // With `owner`, a key the call writes is bound to that peer (COMPARE_SET_OWNED); without, it is
  // permanent.
  std::string compare_set(const std::string& key, const std::string& expected, std::string desired,
                          StorePeer* owner = nullptr);
  const std::string* get(const std::string& key) const;
  // The stored value itself (null when missing): it stays valid, unchanged, after the key changes.
  Value shared(const std::string& key) const;
  // Adds to the decimal integer stored at `key` (0 when missing) and stores the sum as decimal
  // text. Throws std::invalid_argument when the stored value is not a decimal integer.
  int64_t add(const std::string& key, int64_t delta);
  void append(const std::string& key, std::string_view value);
  bool erase(const std::string& key);
  // Erases every key and queue (watchers see each deletion). Waits, watches and peers stay.
  void clear();
  size_t size() const { return data_.size(); }
  // The bytes of every value held (counted on each call: for metrics, not for a hot path).
  size_t value_bytes() const;
  std::vector<std::string> keys() const;
  // Every key that starts with `prefix` and its value, in key order (queues are not keys).
  std::vector<std::pair<std::string, std::string>> with_prefix(std::string_view prefix) const;

  // True when every key exists (as a value, or as a non-empty queue).
  bool check(const std::vector<std::string>& keys) const;
  // True when every key exists now. Otherwise `peer` is sent STOP_WAITING once they all do; a peer
  // has at most one pending wait, and a new one replaces it.
  bool wait(const std::vector<std::string>& keys, StorePeer& peer);
  // Drops the peer's pending WAIT or BARRIER, if any.
  void cancel_wait(StorePeer& peer);
  // Counts `peer` in at the barrier `key`; STOP_WAITING goes to every peer counted in once the
  // count reaches `world_size`. Returns true when it is reached by this call (the caller replies
  // for `peer`).
  bool barrier(const std::string& key, int64_t world_size, StorePeer& peer);

  void queue_push(const std::string& key, std::string value);
  // Returns the queue's length before the pop, and the popped value when it was not empty.
  std::pair<int64_t, std::optional<std::string>> queue_pop(const std::string& key);
  int64_t queue_len(const std::string& key) const;

  // Registers a watch. Extension watches first get an EXISTING frame for each matching key and then
  // a REGISTERED frame; a legacy WATCH_KEY gets the single byte KEY_CALLBACK_REGISTERED.
  void watch(StorePeer& peer, wire::WatchMode mode, const std::string& key, bool legacy);

  // Forgets everything about a peer that is going away: its wait, its watches, and deletes the keys
  // it owns (watchers see KEY_DELETED).
  void drop_peer(StorePeer& peer);

  size_t owned_key_count() const;
  // Peers with a pending WAIT or BARRIER.
  size_t waiter_count() const { return waiters_.size(); }

 private:
  struct Entry {
    Value value;
    StorePeer* owner = nullptr;
  };
  struct Waiter {
    size_t remaining = 0;
    std::vector<std::string> keys;  // keys still awaited, or the barrier key
    bool barrier = false;
  };
  // One watch a peer holds: an exact key or a prefix.
  struct Watched {
    std::string key;
    bool prefix;
  };

  void changed(const std::string& key, const std::string* old_value, const std::string* new_value);
  void wake(const std::string& key);
  void notify_watchers(const std::string& key, const std::string* old_value,
                       const std::string* new_value);
  bool has_watchers(const std::string& key) const;
  void set_owner(const std::string& key, Entry& entry, StorePeer* owner);
  bool exists(const std::string& key) const;
  // Calls `f(key, entry)` for every key that starts with `prefix`, in key order.
  template <typename F>
  void for_each_with_prefix(std::string_view prefix, F&& f) const;

  std::unordered_map<std::string, Entry> data_;
  // Every key of data_ and its entry, in key order (views of data_'s own keys and pointers to
  // their entries, which stay put until erased): a prefix read, or a prefix watch's first answer,
  // costs the keys under the prefix, not a pass over every key (10,000 agents each watching a
  // prefix as they joined had cost 10,000 passes over the job's 20,000 keys).
  std::map<std::string_view, const Entry*> ordered_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<StorePeer*>> waiting_;  // key -> waiting peers
  std::unordered_map<StorePeer*, Waiter> waiters_;
  std::unordered_map<std::string, std::vector<StorePeer*>> barriers_;  // key -> peers counted in
  // Watchers by key and by distinct prefix, and each peer's watches, so
  // that a change costs the distinct prefixes plus its own watchers, and a peer's departure its own
  // watches: not every watch of every peer.
  std::unordered_map<std::string, std::unordered_set<StorePeer*>> key_watchers_;
  std::unordered_map<std::string, std::unordered_set<StorePeer*>> prefix_watchers_;
  std::unordered_map<StorePeer*, std::vector<Watched>> watches_;
  std::unordered_map<StorePeer*, std::unordered_set<std::string>> owned_;
};

}  // namespace ddprun::store
