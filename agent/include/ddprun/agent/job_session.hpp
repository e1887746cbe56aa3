#pragma once
// One agent's session with its job's keys in the store: a presence key bound to a keep-alive
// connection (it vanishes when the agent dies or is cut off, measured on the server's clock), a
// connection for requests, and one prefix watch whose events feed on_event(). Coordinators built on
// it keep a mirror of the job there and wait, with wait_until(), on conditions over that mirror:
// nothing is polled.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/rendezvous/async_store_client.hpp"
#include "ddprun/rendezvous/store_watch.hpp"

namespace ddprun::agent {

struct SessionSpec {
  std::string run_id;
  std::string store_host;
  int store_port = 0;
  std::chrono::milliseconds join_timeout{600'000};
  std::chrono::milliseconds heartbeat_timeout{5'000};
};

class JobSession : public std::enable_shared_from_this<JobSession> {
 public:
  virtual ~JobSession();
  // Closes the store connections (the presence key vanishes); background work and every wait end.
  void leave();
  // Releases a coordinator's wait for a reason to stop the workers (its *_event() returns "").
  void stop_waiting();

 protected:
  JobSession(boost::asio::any_io_executor ex, SessionSpec spec);
  // Connects (retrying until join_timeout while the store comes up), binds `presence_key` (relative
  // to the job's prefix) to this session, and starts watching the job's keys: their current values
  // reach on_event() before open() returns.
  boost::asio::awaitable<void> open(const std::string& presence_key, const std::string& value);
  // A change of the job's key `key` (relative to the job's prefix). Exceptions are logged and
  // ignored.
  virtual void on_event(const std::string& key, const rendezvous::WatchEventRecord& e) = 0;
  // Waits until pred() holds or the deadline passes; returns pred(). Throws StoreConnectionError
  // once the session has lost the store.
  boost::asio::awaitable<bool> wait_until(std::function<bool()> pred,
                                          std::chrono::steady_clock::time_point deadline);
  // Wakes every wait_until() to re-check its condition.
  void notify();
  // For *_event() waits: clear at their start, set by stop_waiting().
  bool stop_requested() const { return stop_waiting_; }
  void clear_stop_request() { stop_waiting_ = false; }
  // The value of a node's presence key, {"nproc": N, "host": H}, as both coordinators read it.
  static std::string node_record(int nproc, const std::string& host);
  // The job-prefixed store key of `rest`.
  std::string key(const std::string& rest) const;
  rendezvous::AsyncStoreClient& client() { return *client_; }
  const SessionSpec& session_spec() const { return session_; }
  boost::asio::any_io_executor executor() const { return ex_; }

 private:
  void apply(const rendezvous::WatchEventRecord& e);
  boost::asio::awaitable<void> pump();
  boost::asio::awaitable<void> heartbeat();
  void background_ended();
  // The store connection is gone (unless this agent left): every wait ends with `e`'s message.
  void lost_store(const std::exception& e);

  boost::asio::any_io_executor ex_;
  SessionSpec session_;
  std::string base_;
  std::unique_ptr<rendezvous::AsyncStoreClient> presence_;
  std::unique_ptr<rendezvous::AsyncStoreClient> client_;
  std::unique_ptr<rendezvous::AsyncStoreWatch> watch_;
  std::vector<boost::asio::steady_timer*> waiters_;
  boost::asio::steady_timer heartbeat_timer_;
  std::string broken_;  // set when the store connection is lost
  bool left_ = false;
  bool stop_waiting_ = false;
  std::shared_ptr<JobSession> self_;  // held while pump() or heartbeat() runs
  int background_ = 0;
};

}  // namespace ddprun::agent
