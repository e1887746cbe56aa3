#pragma once
// The job store on ddprund (or an agent-hosted StoreServer), through ddprun's extensions of the
// TCPStore protocol: the presence key is SET_OWNED on a connection with a server-side KEEPALIVE of
// the heartbeat timeout (pinged at a third of it), the watch is a prefix WATCH on a connection of
// its own, and read_prefix is GET_PREFIX. Job keys live under "ddprun/<run_id>/".
#include <chrono>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/rendezvous/job_store.hpp"

namespace ddprun::rendezvous {

class AsyncStoreClient;
class AsyncStoreWatch;

struct TcpJobStoreSpec {
  std::string run_id;
  std::string host;
  int port = 0;
  std::chrono::milliseconds join_timeout{600'000};
  std::chrono::milliseconds heartbeat_timeout{5'000};
};

class TcpJobStore final : public JobStore, public std::enable_shared_from_this<TcpJobStore> {
 public:
  // Create through std::make_shared: the heartbeat keeps the object alive while it runs.
  TcpJobStore(boost::asio::any_io_executor ex, TcpJobStoreSpec spec);
  // The store key of the job's key `key` ("ddprun/<run_id>/<key>").
  static std::string job_key(const std::string& run_id, const std::string& key);
  // The same key as a StoreServer holds it (the client's key prefix comes first): for writing the
  // job's keys into an in-process server's KeyValueStore directly.
  static std::string server_key(const std::string& run_id, const std::string& key);
  ~TcpJobStore() override;

  boost::asio::awaitable<std::vector<KeyEvent>> join(std::string presence_key,
                                                     std::string value) override;
  boost::asio::awaitable<KeyEvent> next_event() override;
  boost::asio::awaitable<std::string> compare_set(std::string key, std::string expected,
                                                  std::string desired) override;
  boost::asio::awaitable<void> set(std::string key, std::string value) override;
  boost::asio::awaitable<std::vector<KeyEvent>> read_prefix(std::string prefix) override;
  void leave() override;

 private:
  boost::asio::awaitable<void> heartbeat();
  // Connects client_ (requests) if it is not yet: requests may come before join().
  boost::asio::awaitable<void> ensure_client();
  // Ends the session: the watch is closed so that next_event() reports `why`.
  void lost(std::string why);
  void check_open() const;

  boost::asio::any_io_executor ex_;
  TcpJobStoreSpec spec_;
  std::string base_;  // "ddprun/<run_id>/"
  std::unique_ptr<AsyncStoreClient> presence_;
  std::unique_ptr<AsyncStoreClient> client_;
  std::unique_ptr<AsyncStoreWatch> watch_;
  boost::asio::steady_timer heartbeat_timer_;
  std::string broken_;  // why the session ended, once it has
};

}  // namespace ddprun::rendezvous
