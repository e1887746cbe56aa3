#pragma once
// The seam between the rendezvous logic and the service that holds one job's keys: what the
// handlers need from a store, and nothing of any one store's wire format. Backends: TcpJobStore
// (ddprund's extensions of the TCPStore protocol). Keys are relative to the job's own prefix,
// which the backend chooses from the run id.
//
// Contract: requests (compare_set, set, read_prefix, claim, watch_prefixes) may be issued from
// several coroutines at once, beside a pending next_event(); the backend takes them in turn.
// Requests may come before join() (a job-wide check before this node shows itself): they connect
// as join() does. Every operation is bounded by the backend's timeouts and
// throws StoreTimeout or StoreConnectionError (errors.hpp). Coroutine parameters are taken by
// value: the callee owns them.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>

namespace ddprun::rendezvous {

// One key of the job as the store reports it.
struct KeyEvent {
  std::string key;  // relative to the job's prefix
  std::string value;
  bool deleted = false;
};

// The keys a session follows: exact keys, and every key under a prefix. What an agent follows is
// what it pays for: a key every agent follows costs one event per agent per change.
struct WatchSet {
  std::vector<std::string> keys;
  std::vector<std::string> prefixes;
};

// This agent's wall clock against the store's (store::wall_clock_micros on each side), measured
// when it joined: the store's clock minus this one, from the quickest of a few round trips (the
// midpoint of each), and that round trip, which bounds the error.
struct ClockOffset {
  int64_t offset_micros = 0;
  int64_t round_trip_micros = 0;
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Measured at join where the store can tell its time (ddprun's TCP store); nullopt otherwise.
  virtual std::optional<ClockOffset> clock_offset() const { return std::nullopt; }

  // Connects (retrying while the store comes up, up to the join timeout), binds `presence_key` =
  // `value` to this agent's liveness (the key vanishes when the agent dies, leaves, or cannot reach
  // the store for the heartbeat timeout; keeping it alive is the backend's business), and starts
  // watching the keys of `watched`. Returns those that exist now; next_event() then delivers every
  // later change of them, none missed and none twice.
  virtual boost::asio::awaitable<std::vector<KeyEvent>> join(std::string presence_key,
                                                             std::string value,
                                                             WatchSet watched) = 0;
  // Follows every key under each of `prefixes` too, from now on: returns those that exist now, and
  // next_event() delivers their later changes. Prefixes already followed are not repeated.
  virtual boost::asio::awaitable<std::vector<KeyEvent>> watch_prefixes(
      std::vector<std::string> prefixes) = 0;
  // The next change of a followed key. Throws StoreConnectionError once the store is lost (this
  // agent's presence is then gone or going) and after leave().
  virtual boost::asio::awaitable<KeyEvent> next_event() = 0;
  // Creates `key` = `value` bound to this agent's presence, unless the key exists: it vanishes
  // when the presence does (the agent dies, leaves, is paused or cut off). Returns the key's value
  // after the call (`value` when this agent holds it). A held claim survives the store restarting:
  // the backend makes it again for its holder; other agents do not put a claimed key back.
  virtual boost::asio::awaitable<std::string> claim(std::string key, std::string value) = 0;
  // torch's rules: a missing key is created only when `expected` is empty. Returns the value after
  // the operation (`expected` itself when the key is missing and `expected` is not empty).
  virtual boost::asio::awaitable<std::string> compare_set(std::string key, std::string expected,
                                                          std::string desired) = 0;
  // compare_set(), made only while this agent holds `claim`, as set_all_holding(): nullopt, having
  // written nothing, where it no longer does.
  virtual boost::asio::awaitable<std::optional<std::string>> compare_set_holding(
      std::string claim, std::string key, std::string expected, std::string desired) = 0;
  virtual boost::asio::awaitable<void> set(std::string key, std::string value) = 0;
  // set() of every (key, value), in as few requests as the backend allows (not atomic as a whole),
  // made only while this agent holds `claim` (a key its claim() took): the writes of a role that
  // one agent holds at a time (the leader's). Returns false, having written nothing more, where the
  // agent no longer holds it: its presence lapsed, if only while it was paused or cut off (it may
  // not have heard yet), or another agent holds the key now. etcd checks the claim in each write's
  // own transaction; ddprund's backend checks this agent's lease on its own clock just before each
  // request (a pause between that check and the send is the window it leaves).
  virtual boost::asio::awaitable<bool> set_all_holding(
      std::string claim, std::vector<std::pair<std::string, std::string>> entries) = 0;
  // Every key under `prefix` with its value, in key order.
  virtual boost::asio::awaitable<std::vector<KeyEvent>> read_prefix(std::string prefix) = 0;
  // Whether `key`, another agent's presence that this session was told of, is only kept for its
  // holder (a store that lost its keys gives their holders time to come back) and its holder has
  // not been heard from since: it may be cut off and running an older round. Such a key is
  // reported deleted, or becomes confirmed, within the heartbeat timeout.
  virtual bool unconfirmed(const std::string& key) const = 0;
  // Gives up the presence and closes every connection: pending and later operations throw
  // StoreConnectionError. Idempotent.
  virtual void leave() = 0;
};

}  // namespace ddprun::rendezvous
