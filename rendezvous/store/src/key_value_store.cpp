#include "ddprun/store/key_value_store.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <utility>

namespace ddprun::store {
namespace {

void erase_one(std::vector<StorePeer*>& peers, StorePeer* peer) {
  auto it = std::find(peers.begin(), peers.end(), peer);
  if (it != peers.end()) peers.erase(it);
}

int64_t parse_decimal(const std::string& key, const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    throw std::invalid_argument("ADD on key '" + key + "' whose value is not a decimal integer");
  }
  return value;
}

}  // namespace

bool KeyValueStore::exists(const std::string& key) const {
  if (data_.contains(key)) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

bool KeyValueStore::has_watchers(const std::string& key) const {
  if (key_watchers_.contains(key)) return true;
  return std::any_of(prefix_watchers_.begin(), prefix_watchers_.end(),
                     [&](const auto& w) { return key.starts_with(w.first); });
}

void KeyValueStore::set_owner(const std::string& key, Entry& entry, StorePeer* owner) {
  if (entry.owner == owner) return;
  if (entry.owner != nullptr) owned_[entry.owner].erase(key);
  entry.owner = owner;
  if (owner != nullptr) owned_[owner].insert(key);
}

void KeyValueStore::changed(const std::string& key, const std::string* old_value,
                            const std::string* new_value) {
  wake(key);
  notify_watchers(key, old_value, new_value);
}

template <typename F>
void KeyValueStore::for_each_with_prefix(std::string_view prefix, F&& f) const {
  for (auto k = ordered_.lower_bound(prefix); k != ordered_.end() && k->first.starts_with(prefix);
       ++k) {
    f(k->first, *k->second);
  }
}

void KeyValueStore::set(const std::string& key, std::string value, StorePeer* owner) {
  auto [it, inserted] = data_.try_emplace(key);
  if (inserted) ordered_.emplace(it->first, &it->second);
  const bool watched = has_watchers(key);
  Value old =
      std::exchange(it->second.value, std::make_shared<const std::string>(std::move(value)));
  set_owner(key, it->second, owner);
  wake(key);
  if (watched) notify_watchers(key, inserted ? nullptr : old.get(), it->second.value.get());
}

std::string KeyValueStore::compare_set(const std::string& key, const std::string& expected,
                                       std::string desired, StorePeer* owner) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) return expected;
    set(key, desired, owner);
    return desired;
  }
  if (*it->second.value == expected) {
    Value old =
        std::exchange(it->second.value, std::make_shared<const std::string>(std::move(desired)));
    set_owner(key, it->second, owner);
    changed(key, old.get(), it->second.value.get());
  }
  return *it->second.value;
}

const std::string* KeyValueStore::get(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : it->second.value.get();
}

KeyValueStore::Value KeyValueStore::shared(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : it->second.value;
}

int64_t KeyValueStore::add(const std::string& key, int64_t delta) {
  auto it = data_.find(key);
  int64_t sum = delta;
  if (it != data_.end() &&
      __builtin_add_overflow(parse_decimal(key, *it->second.value), delta, &sum)) {
    throw std::invalid_argument("ADD on key '" + key + "' overflows a 64-bit integer");
  }
  set(key, std::to_string(sum));
  return sum;
}

void KeyValueStore::append(const std::string& key, std::string_view value) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    set(key, std::string(value));
    return;
  }
  std::string next;
  next.reserve(it->second.value->size() + value.size());
  next.append(*it->second.value).append(value);
  Value old = std::exchange(it->second.value, std::make_shared<const std::string>(std::move(next)));
  set_owner(key, it->second, nullptr);
  wake(key);
  notify_watchers(key, old.get(), it->second.value.get());
}

bool KeyValueStore::erase(const std::string& key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  set_owner(key, it->second, nullptr);
  Value old = std::move(it->second.value);
  ordered_.erase(it->first);
  data_.erase(it);
  notify_watchers(key, old.get(), nullptr);
  return true;
}

void KeyValueStore::clear() {
  for (const auto& k : keys()) erase(k);
  queues_.clear();
}

std::vector<std::string> KeyValueStore::keys() const {
  std::vector<std::string> out;
  out.reserve(data_.size());
  for (const auto& [k, _] : data_) out.push_back(k);
  return out;
}

std::vector<std::pair<std::string, std::string>> KeyValueStore::with_prefix(
    std::string_view prefix) const {
  std::vector<std::pair<std::string, std::string>> out;
  for_each_with_prefix(prefix, [&](std::string_view k, const Entry& e) {
    out.emplace_back(std::string(k), *e.value);
  });
  return out;
}

bool KeyValueStore::check(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return exists(k); });
}

bool KeyValueStore::wait(const std::vector<std::string>& keys, StorePeer& peer) {
  cancel_wait(peer);
  if (check(keys)) return true;
  Waiter w;
  for (const auto& k : keys) {
    if (exists(k)) continue;
    waiting_[k].push_back(&peer);
    w.keys.push_back(k);
    ++w.remaining;
  }
  waiters_[&peer] = std::move(w);
  return false;
}

void KeyValueStore::cancel_wait(StorePeer& peer) {
  auto it = waiters_.find(&peer);
  if (it == waiters_.end()) return;
  auto& lists = it->second.barrier ? barriers_ : waiting_;
  for (const auto& k : it->second.keys) {
    auto l = lists.find(k);
    if (l == lists.end()) continue;
    erase_one(l->second, &peer);
    if (l->second.empty()) lists.erase(l);
  }
  waiters_.erase(it);
}

void KeyValueStore::wake(const std::string& key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  std::vector<StorePeer*> peers = std::move(it->second);
  waiting_.erase(it);
  for (StorePeer* p : peers) {
    auto w = waiters_.find(p);
    if (w == waiters_.end() || w->second.barrier) continue;
    if (--w->second.remaining == 0) {
      waiters_.erase(w);
      const char stop = static_cast<char>(wire::kStopWaiting);
      p->deliver({&stop, 1});
    }
  }
}

bool KeyValueStore::barrier(const std::string& key, int64_t world_size, StorePeer& peer) {
  cancel_wait(peer);
  const int64_t arrived = add(key, 1);
  if (arrived < world_size) {
    barriers_[key].push_back(&peer);
    waiters_[&peer] = Waiter{1, {key}, true};
    return false;
  }
  auto it = barriers_.find(key);
  if (it != barriers_.end()) {
    std::vector<StorePeer*> peers = std::move(it->second);
    barriers_.erase(it);
    const char stop = static_cast<char>(wire::kStopWaiting);
    for (StorePeer* p : peers) {
      waiters_.erase(p);
      p->deliver({&stop, 1});
    }
  }
  return true;
}

void KeyValueStore::queue_push(const std::string& key, std::string value) {
  queues_[key].push_back(std::move(value));
  // One new element can satisfy one popper: wake only the first waiter, as torch does.
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  StorePeer* p = it->second.front();
  it->second.erase(it->second.begin());
  if (it->second.empty()) waiting_.erase(it);
  auto w = waiters_.find(p);
  if (w != waiters_.end() && --w->second.remaining == 0) {
    waiters_.erase(w);
    const char stop = static_cast<char>(wire::kStopWaiting);
    p->deliver({&stop, 1});
  }
}

std::pair<int64_t, std::optional<std::string>> KeyValueStore::queue_pop(const std::string& key) {
  auto it = queues_.find(key);
  if (it == queues_.end()) return {0, std::nullopt};
  const auto len = static_cast<int64_t>(it->second.size());
  std::string value = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  return {len, std::move(value)};
}

int64_t KeyValueStore::queue_len(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

void KeyValueStore::watch(StorePeer& peer, wire::WatchMode mode, const std::string& key,
                          bool legacy) {
  const bool prefix = !legacy && mode == wire::WatchMode::kPrefix;
  watches_[&peer].push_back(Watched{key, prefix});
  if (legacy) {
    key_watchers_[key].insert(&peer);
    const char registered = static_cast<char>(wire::WatchEvent::kRegistered);
    peer.deliver({&registered, 1});
    return;
  }
  std::string frames;
  if (!prefix) {
    if (const std::string* v = get(key)) {
      wire::put_watch_frame(frames, wire::WatchEvent::kExisting, key, {}, *v);
    }
    key_watchers_[key].insert(&peer);
  } else {
    for_each_with_prefix(key, [&](std::string_view k, const Entry& e) {
      wire::put_watch_frame(frames, wire::WatchEvent::kExisting, k, {}, *e.value);
    });
    prefix_watchers_[key].insert(&peer);
  }
  wire::put_watch_frame(frames, wire::WatchEvent::kRegistered, key, {}, {});
  peer.deliver(frames);
}

void KeyValueStore::notify_watchers(const std::string& key, const std::string* old_value,
                                    const std::string* new_value) {
  if (watches_.empty()) return;
  const auto event = new_value == nullptr   ? wire::WatchEvent::kKeyDeleted
                     : old_value == nullptr ? wire::WatchEvent::kKeyCreated
                                            : wire::WatchEvent::kKeyUpdated;
  std::string frame;
  const auto build = [&] {
    if (frame.empty()) {
      wire::put_watch_frame(frame, event, key, old_value ? *old_value : std::string_view{},
                            new_value ? *new_value : std::string_view{});
    }
    return std::string_view(frame);
  };
  if (auto it = key_watchers_.find(key); it != key_watchers_.end()) {
    for (StorePeer* peer : it->second) peer->deliver(build());
  }
  for (const auto& [prefix, peers] : prefix_watchers_) {
    if (!key.starts_with(prefix)) continue;
    for (StorePeer* peer : peers) peer->deliver(build());
  }
}

void KeyValueStore::drop_peer(StorePeer& peer) {
  cancel_wait(peer);
  if (auto watched = watches_.find(&peer); watched != watches_.end()) {
    for (const Watched& w : watched->second) {
      if (w.prefix) {
        auto it = prefix_watchers_.find(w.key);
        if (it != prefix_watchers_.end() && it->second.erase(&peer) > 0 && it->second.empty()) {
          prefix_watchers_.erase(it);
        }
      } else {
        auto it = key_watchers_.find(w.key);
        if (it != key_watchers_.end() && it->second.erase(&peer) > 0 && it->second.empty()) {
          key_watchers_.erase(it);
        }
      }
    }
    watches_.erase(watched);
  }
  auto owned = owned_.find(&peer);
  if (owned == owned_.end()) return;
  std::unordered_set<std::string> keys = std::move(owned->second);
  owned_.erase(owned);
  for (const auto& k : keys) {
    auto it = data_.find(k);
    if (it == data_.end() || it->second.owner != &peer) continue;
    Value old = std::move(it->second.value);
    ordered_.erase(it->first);
    data_.erase(it);
    notify_watchers(k, old.get(), nullptr);
  }
}

size_t KeyValueStore::owned_key_count() const {
  size_t n = 0;
  for (const auto& [_, keys] : owned_) n += keys.size();
  return n;
}

size_t KeyValueStore::value_bytes() const {
  size_t n = 0;
  for (const auto& [key, entry] : data_) n += entry.value ? entry.value->size() : 0;
  return n;
}

}  // namespace ddprun::store
