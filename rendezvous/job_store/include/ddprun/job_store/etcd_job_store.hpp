#pragma once
// The job store on an etcd v3 cluster, through its HTTP/JSON gateway (etcd 3.4 and later;
// torchrun's etcd backends speak the v2 API, which 3.4 turned off and 3.6 removed). Presence is a
// key on a lease whose TTL is the heartbeat timeout, kept alive at a third of it; the job's keys
// are read with one range and then watched from the revision after it, so the snapshot and the
// events are consistent; compare-and-set is a transaction. Every call fails over between the
// cluster's members, so losing a member (the leader included) costs a retry, not the job. A lease
// that may be gone (not renewed within its TTL, counted from when the last renewal was sent: after
// a pause, or cut off from every member) or that etcd dropped is revoked and replaced by a new one
// with the presence key on it: the session hears the key's deletion at once, then its creation,
// and the agent rejoins as a new node (or, after the reconnect timeout without etcd, gives up). Job
// keys live under "<prefix><run_id>/". The gateway takes one range per watch stream, so the watch
// covers the whole job and this store keeps a mirror of every job key; next_event() reports only
// the keys the session follows, and watch_prefixes() answers from the mirror, in step with the
// stream. A claim is a key on this agent's lease, created by a transaction that requires it to be
// absent.
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json_fwd.hpp>

#include "ddprun/job_store/etcd_endpoint.hpp"
#include "ddprun/job_store/job_store.hpp"
#include "ddprun/job_store/job_timeouts.hpp"
#include "ddprun/store/tls.hpp"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace ddprun::store {
class AsyncMutex;
}  // namespace ddprun::store

namespace ddprun::rendezvous {

namespace etcd {
class Client;
class Login;
class LeadershipProbe;
class WatchCheck;
class WatchStream;
}  // namespace etcd

struct EtcdJobStoreSpec {
  std::vector<EtcdEndpoint> endpoints;  // the cluster's members, any order
  std::string prefix = "/ddprun/";
  std::string run_id;
  std::chrono::milliseconds join_timeout = kDefaultJoinTimeout;
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
  // How long a node whose lease lapsed tries to rejoin before it gives the store up for lost.
  std::chrono::milliseconds reconnect_timeout = kDefaultReconnectTimeout;
  store::TlsFiles tls;  // the members' certificates are checked against the endpoint hosts
  std::optional<EtcdLogin> login{};
};

class EtcdJobStore final : public JobStore, public std::enable_shared_from_this<EtcdJobStore> {
 public:
  // Create through std::make_shared: the keep-alive keeps the object alive while it runs.
  EtcdJobStore(boost::asio::any_io_executor ex, EtcdJobStoreSpec spec);
  ~EtcdJobStore() override;

  boost::asio::awaitable<std::vector<KeyEvent>> join(std::string presence_key, std::string value,
                                                     WatchSet watched) override;
  boost::asio::awaitable<std::vector<KeyEvent>> watch_prefixes(
      std::vector<std::string> prefixes) override;
  boost::asio::awaitable<KeyEvent> next_event() override;
  boost::asio::awaitable<std::string> claim(std::string key, std::string value) override;
  boost::asio::awaitable<std::string> compare_set(std::string key, std::string expected,
                                                  std::string desired) override;
  // One transaction: the compare-and-set's condition and the claim's.
  boost::asio::awaitable<std::optional<std::string>> compare_set_holding(
      std::string claim, std::string key, std::string expected, std::string desired) override;
  boost::asio::awaitable<void> set(std::string key, std::string value) override;
  // Transactions of up to 128 puts (etcd's default --max-txn-ops), each on the condition that the
  // claim's key still holds this agent's value (a lapsed lease took the key with it).
  boost::asio::awaitable<bool> set_all_holding(
      std::string claim, std::vector<std::pair<std::string, std::string>> entries) override;
  boost::asio::awaitable<std::vector<KeyEvent>> read_prefix(std::string prefix) override;
  // etcd keeps its keys: every presence is its holder's lease.
  bool unconfirmed(const std::string&) const override { return false; }
  // Also revokes the lease (in the background, briefly), so that peers see this node leave at once
  // rather than after the TTL.
  void leave() override;

 private:
  // A request through client_ (see etcd::Client::call).
  boost::asio::awaitable<nlohmann::json> call(std::string path, nlohmann::json body,
                                              std::chrono::steady_clock::time_point deadline);
  boost::asio::awaitable<void> keep_alive();
  // One renewal of the lease, tried until `give_up` (asking the members about an election before
  // the lease's end, which may move `give_up` later); `waiting_for_etcd`: every member was down at
  // the last try, one try until `give_up` only.
  struct Renewal {
    int64_t ttl = 0;                             // > 0: renewed for that many seconds
    bool answered = false;                       // a member answered (ttl 0: the lease is gone)
    std::chrono::steady_clock::time_point sent;  // when the last try was sent
    int64_t revision = 0;                        // the answering member's revision
  };
  boost::asio::awaitable<Renewal> renew(std::chrono::steady_clock::time_point give_up,
                                        bool waiting_for_etcd);
  // This node's lease lapsed (`why`): tells the session its presence is gone, revokes the lease and
  // puts the presence on a new one, within the reconnect timeout, or gives the store up for lost.
  boost::asio::awaitable<void> rejoin(std::string why);
  // Whether the watch keeps up with the job's keys on the member it is open on, which answered a
  // renewal at `member_revision` (etcd_watch_check.hpp): ranges the job's keys where the check
  // asks, and moves the watch where it is left behind.
  boost::asio::awaitable<void> check_watch(int64_t member_revision);
  // Breaks the watch so that it opens again on another member, from where it stood.
  void move_watch();
  // Grants a lease of the heartbeat timeout through `client`: this node's lease from now on.
  boost::asio::awaitable<void> grant_lease(etcd::Client& client,
                                           std::chrono::steady_clock::time_point deadline);
  // Puts the presence key on this node's lease.
  boost::asio::awaitable<void> put_presence(etcd::Client& client,
                                            std::chrono::steady_clock::time_point deadline);
  boost::asio::awaitable<void> revoke(std::string lease);
  void lost(std::string why);
  void check_open() const;
  bool follows(const std::string& key) const;
  std::chrono::steady_clock::time_point request_deadline() const;

  boost::asio::any_io_executor ex_;
  EtcdJobStoreSpec spec_;
  std::string base_;                                // "<prefix><run_id>/"
  std::shared_ptr<boost::asio::ssl::context> tls_;  // null: plain HTTP
  std::shared_ptr<etcd::Login> login_;              // null: no authentication
  std::unique_ptr<etcd::Client> client_;            // requests, one at a time
  std::unique_ptr<store::AsyncMutex> client_turn_;
  std::unique_ptr<etcd::Client> lease_client_;
  std::unique_ptr<etcd::WatchStream> watch_;
  std::unique_ptr<etcd::LeadershipProbe> leadership_;
  boost::asio::steady_timer keep_alive_timer_;
  std::string presence_key_;
  std::string presence_value_;
  std::string lease_;  // the lease ID, as the gateway writes it
  std::chrono::seconds lease_ttl_{0};
  // The earliest time etcd may drop the lease: when its last renewal was sent, plus its TTL.
  std::chrono::steady_clock::time_point lease_expiry_;
  // Set while the watch is to be opened again, to when that must have happened.
  std::optional<std::chrono::steady_clock::time_point> reopen_by_;
  int64_t revision_ = 0;  // the last revision of the job's keys this node has seen
  std::unique_ptr<etcd::WatchCheck> watch_check_;  // whether the watch keeps up
  bool range_failure_said_ = false;  // a range that failed is said once, then only in debug
  std::deque<KeyEvent> pending_;
  std::string broken_;
  WatchSet watched_;
  std::map<std::string, std::string> mirror_;  // every job key as the watch has reported it
  std::map<std::string, std::string> claims_;  // the claims this agent took, with its values
};

}  // namespace ddprun::rendezvous
