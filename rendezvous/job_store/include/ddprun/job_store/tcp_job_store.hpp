#pragma once
// The job store on ddprund (or an agent-hosted StoreServer), through ddprun's extensions of the
// TCPStore protocol: the presence key is SET_OWNED on a connection with a server-side KEEPALIVE of
// the heartbeat timeout (pinged at a third of it), the watch is a prefix WATCH on a connection of
// its own, and read_prefix is GET_PREFIX. Job keys live under "ddprun/<run_id>/".
//
// Losing the store after join() is an outage, not the end: the store reconnects in the background
// (requests and next_event() wait for it) and then tells the session what it missed, as events:
//  - The same server (SERVER_INFO's instance) answers: this agent's presence connection was dropped
//    (a pause, a cut, a broken connection), its peers saw it leave, so next_event() reports the
//    deletion of this agent's own presence key, then its re-creation: the agent rejoins as a new
//    node. Keys that changed meanwhile arrive as changes.
//  - A restarted server (another instance; it lost every key) answers: this agent writes back
//    every job key it knew that is not a presence key (compare-and-set from empty, so the first
//    agent back restores and the others agree), re-creates its presence, and holds back the
//    deletion of each peer's presence key for one heartbeat timeout, the time that peer has to
//    come back. Nothing is reported as lost; workers keep running.
// This agent's own lease: once heartbeat_timeout has passed since the last heartbeat the server
// acknowledged (it was paused, or cut off), its presence is gone, and next_event() reports its
// deletion at once, before any reconnection, unless the last try found the store down for
// everyone (connection refused): then nobody can re-form without it, and the workers wait for the
// store within reconnect_timeout.
// Gives up (StoreConnectionError from everything) after reconnect_timeout without the store, or,
// when the store lives in an agent (SERVER_INFO), after the heartbeat timeout or at once when it
// refuses connections: that agent is gone, and so is the store.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/job_store/job_store.hpp"
#include "ddprun/job_store/job_timeouts.hpp"
#include "ddprun/store/async_store_client.hpp"

namespace ddprun::store {
class AsyncMutex;
class AsyncStoreWatch;
}  // namespace ddprun::store

namespace ddprun::rendezvous {

struct TcpJobStoreSpec {
  std::string run_id;
  std::string host;
  int port = 0;
  std::chrono::milliseconds join_timeout = kDefaultJoinTimeout;
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
  // How long a standalone store (ddprund) that went away is waited for, workers running.
  std::chrono::milliseconds reconnect_timeout = kDefaultReconnectTimeout;
  // Given, every connection proves it (auth.hpp) for the job's keys; the run id has no '/'.
  std::optional<store::Token> token{};
  // Enabled, every connection is TLS, the store's certificate checked against `host`.
  store::TlsFiles tls{};
};

class TcpJobStore final : public JobStore, public std::enable_shared_from_this<TcpJobStore> {
 public:
  // Create through std::make_shared: background coroutines keep the object alive while they run.
  TcpJobStore(boost::asio::any_io_executor ex, TcpJobStoreSpec spec);
  // The store key of the job's key `key` ("ddprun/<run_id>/<key>").
  static std::string job_key(const std::string& run_id, const std::string& key);
  // The same key as a StoreServer holds it (the client's key prefix comes first): for writing the
  // job's keys into an in-process server's KeyValueStore directly.
  static std::string server_key(const std::string& run_id, const std::string& key);
  ~TcpJobStore() override;

  // Presence keys are those in the folder of `presence_key` (the part up to its last '/'): every
  // agent of the job is expected to put its own there.
  boost::asio::awaitable<std::vector<KeyEvent>> join(std::string presence_key, std::string value,
                                                     WatchSet watched) override;
  // The prefixes ride a watch connection of their own (the first one is opened then); a later call
  // with new prefixes replaces it by one that has them all.
  boost::asio::awaitable<std::vector<KeyEvent>> watch_prefixes(
      std::vector<std::string> prefixes) override;
  boost::asio::awaitable<KeyEvent> next_event() override;
  // COMPARE_SET_OWNED on the presence connection.
  boost::asio::awaitable<std::string> claim(std::string key, std::string value) override;
  boost::asio::awaitable<std::string> compare_set(std::string key, std::string expected,
                                                  std::string desired) override;
  boost::asio::awaitable<std::optional<std::string>> compare_set_holding(
      std::string claim, std::string key, std::string expected, std::string desired) override;
  boost::asio::awaitable<void> set(std::string key, std::string value) override;
  // MULTI_SET, up to 4096 keys a request, each sent only while this agent holds the claim and its
  // last acknowledged heartbeat is less than a heartbeat timeout old.
  boost::asio::awaitable<bool> set_all_holding(
      std::string claim, std::vector<std::pair<std::string, std::string>> entries) override;
  boost::asio::awaitable<std::vector<KeyEvent>> read_prefix(std::string prefix) override;
  bool unconfirmed(const std::string& key) const override { return withheld_.contains(key); }
  void leave() override;
  std::optional<ClockOffset> clock_offset() const override { return clock_; }

 private:
  // A connection's options: the credential, when the spec has a token.
  store::ClientOptions client_options() const;
  // Throws StoreAuthError where the server wants a token and the spec has none.
  void check_credential(const store::ServerInfo& server) const;
  using Clock = std::chrono::steady_clock;

  // Measures clock_ on the presence connection, where the server tells its time.
  boost::asio::awaitable<void> measure_clock();
  boost::asio::awaitable<void> heartbeat();
  // Connects client_ (requests) if it is not yet: requests may come before join().
  boost::asio::awaitable<void> ensure_client();
  // The client for the next request: waits out a reconnection; throws once the session ended.
  boost::asio::awaitable<std::shared_ptr<store::AsyncStoreClient>> usable_client();
  // After a request failed with `e`: rethrows it (before join(), or once the session ended), or
  // starts a reconnection for the request to wait out and retry.
  void request_failed(const std::exception& e);
  // Claims `full_key` = `value` on `presence`, bound to it even where this agent's value is there
  // already (held by an earlier presence of its own); returns the key's value after.
  static boost::asio::awaitable<std::string> claim_on(store::AsyncStoreClient& presence,
                                                      const std::string& full_key,
                                                      const std::string& value);
  // Whether this agent holds `claim` now, as far as it can tell without asking: taken, and its
  // presence not lapsed by its own clock.
  bool holds(const std::string& claim) const;
  // Starts a reconnection unless one is under way or the session ended.
  void connection_lost(const std::string& why);
  boost::asio::awaitable<void> reconnect(uint64_t outage);
  // One try at re-establishing the session with the store; false when it did not answer.
  boost::asio::awaitable<bool> try_reconnect(uint64_t outage, Clock::time_point deadline);
  // try_reconnect's parts: the job's keys put back in a restarted store, and this node's
  // presence and claims made again (see the .cpp).
  boost::asio::awaitable<size_t> put_back_keys(store::AsyncStoreClient& client);
  boost::asio::awaitable<std::shared_ptr<store::AsyncStoreClient>> present_again(
      const store::ClientOptions& o, std::map<std::string, std::string>& claims);
  // A try that reached the store: the new connections and what the store holds now.
  struct Reconnection {
    std::shared_ptr<store::AsyncStoreClient> client;
    std::shared_ptr<store::AsyncStoreClient> presence;  // null when the old one survived
    std::shared_ptr<store::AsyncStoreWatch> watch;
    std::shared_ptr<store::AsyncStoreWatch>
        extra_watch;  // null when watch_prefixes() was never called
    std::map<std::string, std::string> now_there;
    std::map<std::string, std::string> claims;  // the claims this agent still holds
    store::ServerInfo info;
    bool restarted = false;
    size_t restored = 0;
  };
  // Takes the new connections and turns what changed into events.
  void resume(Reconnection r);
  // At this agent's lease expiry during outage `outage`: reports its presence gone, unless the
  // store was found down.
  boost::asio::awaitable<void> watch_lease(uint64_t outage);
  // Queues the deletion of this agent's presence key, once.
  void report_expelled(const std::string& why);
  bool is_presence_key(const std::string& key) const;
  // Opens a watch connection following `keys` and `prefixes`; adds what exists now to `now_there`.
  boost::asio::awaitable<std::shared_ptr<store::AsyncStoreWatch>> open_watch(
      store::ClientOptions options, std::vector<std::string> keys,
      std::vector<std::string> prefixes, std::map<std::string, std::string>& now_there);
  // Feeds `watch`'s events to next_event() while it is one of the current watches.
  boost::asio::awaitable<void> read_events(std::shared_ptr<store::AsyncStoreWatch> watch);
  bool current(const std::shared_ptr<store::AsyncStoreWatch>& watch) const {
    return watch == watch_ || watch == extra_watch_;
  }
  // Queues the difference between known_ and `now_there` (restricted to keys `in_scope`).
  void catch_up(const std::map<std::string, std::string>& now_there,
                const std::function<bool(const std::string&)>& in_scope, bool restarted);
  // Records `e` in known_ (the job's keys as reported).
  void remember(const KeyEvent& e);
  void queue(KeyEvent e);
  // Waits until wake() (a reconnection ended, an event was queued) or `deadline`.
  boost::asio::awaitable<void> wait_for_wake(Clock::time_point deadline = Clock::time_point::max());
  void wake() {
    for (auto* t : sleepers_) t->cancel();
  }
  // Ends the session: every connection is closed so that next_event() reports `why`.
  void lost(std::string why);
  void check_open() const;
  std::string endpoint() const;

  boost::asio::any_io_executor ex_;
  TcpJobStoreSpec spec_;
  store::TlsContext tls_;  // spec_.tls loaded once (null: clear connections)
  std::string base_;       // "ddprun/<run_id>/"
  // Shared: a coroutine suspended in one keeps it alive when a reconnection replaces it.
  std::shared_ptr<store::AsyncStoreClient> presence_;
  std::shared_ptr<store::AsyncStoreClient> client_;
  std::shared_ptr<store::AsyncStoreWatch> watch_;        // follows watched_
  std::shared_ptr<store::AsyncStoreWatch> extra_watch_;  // follows extra_prefixes_
  std::unique_ptr<store::AsyncMutex> requests_;          // client_ takes one request at a time
  std::unique_ptr<store::AsyncMutex> presence_turn_;  // and so does presence_ (heartbeats, claims)
  // watch_prefixes() replaces extra_watch_ one call at a time: two at once each built the new
  // prefix list before the other installed its own, and the later one dropped the earlier's.
  std::unique_ptr<store::AsyncMutex> extra_turn_;
  boost::asio::steady_timer heartbeat_timer_;
  boost::asio::steady_timer lease_timer_;             // an outage's end of lease (watch_lease)
  std::vector<boost::asio::steady_timer*> sleepers_;  // wait_for_wake()s in progress
  // One per connection being made to the store: lost() ends each at once (a connect retried until
  // join_timeout to a store that is not there yet would otherwise outlive leave()).
  std::list<boost::asio::cancellation_signal> connecting_;
  std::string broken_;  // why the session ended, once it has
  bool joined_ = false;
  std::string presence_key_;
  std::string presence_value_;
  std::string presence_folder_;  // e.g. "nodes/"
  WatchSet watched_;
  std::vector<std::string> extra_prefixes_;
  std::set<std::string> claimable_;            // every key claim() was called for
  std::map<std::string, std::string> claims_;  // the claims this agent holds
  store::ServerInfo server_;
  std::optional<ClockOffset> clock_;
  Clock::time_point lease_start_;  // when the last heartbeat the server acknowledged was sent
  // The outage under way, if any (outages are numbered so that stale coroutines stand down).
  bool reconnecting_ = false;
  uint64_t outage_ = 0;
  Clock::time_point outage_start_;
  bool presence_ok_ = true;  // the presence connection (and so the key) survived the outage
  bool refused_ = false;     // the last try of this outage found the store down
  std::string last_error_;
  std::map<std::string, std::string> known_;  // the job's keys as reported (or queued) so far
  std::deque<KeyEvent> pending_;              // reported before the watch's next event
  std::map<std::string, Clock::time_point> withheld_;  // peers' presence keys after a restart
};

}  // namespace ddprun::rendezvous
