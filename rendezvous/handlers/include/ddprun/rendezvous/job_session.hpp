#pragma once
// One agent's session with its job's keys, over a JobStore: the agent's presence key, and a mirror
// of the keys it follows kept current by the store's watch, fed to on_event(). Handlers built on it
// wait, with wait_until(), on conditions over that mirror: nothing is polled. It provides, once for
// every handler over a store, the round-scoped exchange of Rendezvous (publish, gather, raise),
// whose keys it follows itself (every flag from open() on; a topic's values from its first
// gather()).
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/job_store/job_store.hpp"
#include "ddprun/rendezvous/exchange_book.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::rendezvous {

class JobSession : public Rendezvous, public std::enable_shared_from_this<JobSession> {
 public:
  // Job-wide settings as (flag, value); see agree_on().
  using Settings = std::vector<std::pair<std::string, std::string>>;

  ~JobSession() override;
  std::optional<ClockOffset> clock_offset() const override { return store_->clock_offset(); }
  // Leaves the store (the presence key vanishes); the event pump and every wait end.
  void leave_store();
  // Releases a wait for a reason to stop the workers (see stop_requested()).
  void stop_waiting() override;
  // Calls `listener` for every presence key ("nodes/<id>") that appears or vanishes from now on.
  // The session follows every presence key for it (one event per node that joins or leaves).
  void watch_membership(std::function<void(const MembershipChange&)> listener) override;
  void want_members() override { wants_members_ = true; }

  boost::asio::awaitable<void> publish(Scope scope, std::string topic, std::string value) override;
  boost::asio::awaitable<std::vector<std::string>> gather(Scope scope, std::string topic,
                                                          int expected,
                                                          std::chrono::milliseconds wait) override;
  boost::asio::awaitable<void> raise(Scope scope, std::string topic, std::string reason,
                                     std::string detail) override;
  std::optional<Flag> raised(Scope scope, std::string topic) const override;
  bool round_ended(const Round& r) const override { return round_over(r.number); }
  boost::asio::awaitable<std::string> job_secret() override;

 protected:
  JobSession(boost::asio::any_io_executor ex, std::shared_ptr<JobStore> store);
  // Joins the store with `presence_key` = `value` and starts mirroring the keys of `watched` and
  // the presence key itself: their current values reach on_event() before open() returns.
  boost::asio::awaitable<void> open(std::string presence_key, std::string value, WatchSet watched);
  // Mirrors every key under `prefixes` too: their current values reach on_event() before it
  // returns.
  boost::asio::awaitable<void> follow(std::vector<std::string> prefixes);
  // Job-wide settings as (flag, value), e.g. ("--max_restarts", "3"): the first node to join fixes
  // them under the key "settings"; a node whose settings differ leaves the job at once and gets a
  // StoreError naming the first setting that differs, with both values. Call before open(), so
  // that a refused node is never counted as a member.
  boost::asio::awaitable<void> agree_on(Settings settings);
  // A change of the job's key `e.key`. Exceptions are logged and ignored (a malformed key).
  virtual void on_event(const KeyEvent& e) = 0;
  // Waits until pred() holds or the deadline passes; returns pred(). Throws StoreConnectionError
  // once the session has lost the store.
  boost::asio::awaitable<bool> wait_until(std::function<bool()> pred,
                                          std::chrono::steady_clock::time_point deadline);
  // Wakes every wait_until() to re-check its condition.
  void notify();
  // Whether round `number` has ended (a newer one is forming, or the job ended): ends a gather in
  // its scope. The default: never.
  virtual bool round_over(int number) const {
    (void)number;
    return false;
  }
  // A flag raised by another node in `r`'s scope or the job's (raise()), which interrupts `r`.
  std::optional<Flag> peer_flag(const Round& r) const;
  // A flag raised by another node in the job's scope.
  std::optional<Flag> peer_job_flag() const;
  // Whether a node, this one included, raised a flag in `r`'s scope: a round so ended is a failed
  // one (a hang, a node replaced), whoever ends it and for whichever reason comes first.
  bool round_flagged(int number) const;
  // This agent's id among the job's nodes: what follows "nodes/" in its presence key.
  std::string self_id() const;
  // Whether this agent's presence key exists now.
  bool present() const { return present_; }
  // Whether open() has made this agent a member of the job, and it has not left since.
  bool member() const { return opened_ && !left_; }
  // Whether this agent's presence key was deleted since clear_expelled(): the store dropped it
  // (paused, cut off) and its peers went on without it, even if the key is back by now (the
  // backend rejoins on its own). Its workers of the round it was in are stale.
  bool expelled() const { return expelled_; }
  void clear_expelled() { expelled_ = false; }
  // The reason interruption() gives when expelled() holds.
  static constexpr const char* kExpelledReason =
      "this node was expelled from the job: its presence lapsed (it was paused, or cut off from "
      "the store, for longer than the heartbeat timeout) and its peers went on without it; its "
      "workers are stale, it rejoins as a new node";
  // For waits that stop_waiting() releases: clear at their start, set by stop_waiting().
  bool stop_requested() const { return stop_waiting_; }
  void clear_stop_request() { stop_waiting_ = false; }
  // The workers of the node whose presence record (job_records.hpp) is `record`; 1 where it does
  // not say.
  static int nproc_of_record(const std::string& record);
  JobStore& store() { return *store_; }
  // Whether rounds are to name their members (want_members()).
  bool wants_members() const { return wants_members_; }
  boost::asio::any_io_executor executor() const { return ex_; }

 private:
  void apply(const KeyEvent& e);
  void report_membership(const KeyEvent& e);
  boost::asio::awaitable<void> pump();
  boost::asio::awaitable<void> follow_membership();
  // Whether `watched` follows every key under `prefix`.
  static bool follows_all_of(const WatchSet& watched, std::string_view prefix);

  boost::asio::any_io_executor ex_;
  std::shared_ptr<JobStore> store_;
  std::vector<boost::asio::steady_timer*> waiters_;
  std::string presence_key_;
  bool present_ = false;
  bool expelled_ = false;
  std::string broken_;  // set when the store is lost
  bool left_ = false;
  bool opened_ = false;
  WatchSet watched_;  // what the session follows
  bool stop_waiting_ = false;
  std::function<void(const MembershipChange&)> membership_listener_;
  bool wants_members_ = false;
  std::map<std::string, std::string> node_records_;  // "nodes/<id>" -> its record
  ExchangeBook book_;  // what this agent has seen of the round-scoped exchange
};

}  // namespace ddprun::rendezvous
