#pragma once
// One node alone (--standalone, --nnodes=1 on any backend): the agent hosts its workers' store and
// every round is an attempt of its own group. A failure costs one restart; the store is emptied
// before each restart, so that a restarted group never reads what the failed one wrote (torch
// >= 2.4 workers use no per-attempt key prefix).
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/rendezvous/exchange_book.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/rendezvous/rendezvous_config.hpp"
#include "ddprun/store/store_server.hpp"

namespace ddprun::rendezvous {

class LocalRendezvous final : public Rendezvous {
 public:
  // Binds the workers' store at config.store_host:config.store_port; throws StoreError when taken.
  LocalRendezvous(boost::asio::io_context& io, RendezvousConfig config);
  ~LocalRendezvous() override;

  boost::asio::awaitable<void> join() override;
  boost::asio::awaitable<std::optional<Round>> next_round() override;
  boost::asio::awaitable<std::optional<WorkerStoreAddress>> worker_store(Round r) override;
  // Nothing outside the node ends a round: completes only after stop_waiting().
  boost::asio::awaitable<std::string> interruption(Round r) override;
  void stop_waiting() override;
  boost::asio::awaitable<void> end_round(Round r, bool failed) override;
  boost::asio::awaitable<bool> exit_barrier(Round r) override;
  boost::asio::awaitable<void> close(std::string why) override;
  const JobEnd& ending() const override { return ending_; }
  // The exchange has one node: what it publishes or raises is all there is.
  boost::asio::awaitable<void> publish(Scope scope, std::string topic, std::string value) override;
  // One node: a fresh random secret, the same for the agent's lifetime.
  boost::asio::awaitable<std::string> job_secret() override;
  boost::asio::awaitable<std::vector<std::string>> gather(Scope scope, std::string topic,
                                                          int expected,
                                                          std::chrono::milliseconds wait) override;
  boost::asio::awaitable<void> raise(Scope scope, std::string topic, std::string reason,
                                     std::string detail) override;
  std::optional<Flag> raised(Scope scope, std::string topic) const override;
  boost::asio::awaitable<void> leave(bool graceful) override;
  void abandon() override;
  std::string describe() const override;

  uint16_t store_port() const { return server_.port(); }

 private:
  RendezvousConfig config_;
  store::StoreServer server_;
  boost::asio::steady_timer interruption_;
  bool stop_requested_ = false;
  int restarts_ = 0;
  ExchangeBook book_;
  JobEnd ending_;
  std::string secret_;
};

}  // namespace ddprun::rendezvous
