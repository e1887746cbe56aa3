#pragma once
// What the in-process rendezvous tests share: several nodes' handlers and a real store server on
// one io_context, talking over loopback (a Job), and waiting for operations started on it. A round
// forms in milliseconds, so each policy is checked in-process and the multi-process tests only
// check that the pieces are wired together.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "ddprun/job_store/tcp_job_store.hpp"
#include "ddprun/rendezvous/elastic_rendezvous.hpp"
#include "ddprun/rendezvous/rendezvous_config.hpp"
#include "ddprun/store/async_store_client.hpp"
#include "ddprun/store/store_server.hpp"
#include "ddprun/store/store_thread.hpp"
#include "exchanges/failure_reports.hpp"
#include "exchanges/stop_exchange.hpp"
#include "static_rendezvous.hpp"

namespace rendezvous_test {
using namespace ddprun::rendezvous;
namespace failure_reports = ddprun::agent::failure_reports;
namespace stop_exchange = ddprun::agent::stop_exchange;
using namespace ddprun::store;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// The result of an operation started on the io_context.
template <class T>
struct Pending {
  std::optional<T> value;
  std::exception_ptr error;
  bool done = false;
  T get() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};

inline asio::awaitable<bool> completed(asio::awaitable<void> op) {
  co_await std::move(op);
  co_return true;
}

template <class T>
std::shared_ptr<Pending<T>> start_on(asio::io_context& io, asio::awaitable<T> op) {
  auto p = std::make_shared<Pending<T>>();
  asio::co_spawn(io, std::move(op), [p](std::exception_ptr e, T v) {
    p->error = e;
    if (!e) p->value = std::move(v);
    p->done = true;
  });
  return p;
}

// Runs the io_context until pred() holds; false after `limit`.
template <class Pred>
inline bool run_until(asio::io_context& io, Pred pred, std::chrono::milliseconds limit = 5s) {
  const auto deadline = Clock::now() + limit;
  while (!pred() && Clock::now() < deadline) io.run_one_for(10ms);
  return pred();
}

template <class T>
T run_on(asio::io_context& io, asio::awaitable<T> op) {
  auto p = start_on(io, std::move(op));
  REQUIRE(run_until(io, [&] { return p->done; }));
  return p->get();
}

class Job {
 public:
  Job(int min_nodes, int max_nodes) : server_(std::in_place, io_, loopback()) {
    config_.backend = Backend::kC10d;
    config_.run_id = "job";
    config_.min_nodes = min_nodes;
    config_.max_nodes = max_nodes;
    config_.endpoint_host = "127.0.0.1";
    config_.endpoint_port = server_->port();
    config_.local_addr = "127.0.0.1";
    config_.join_timeout = 10s;
    config_.heartbeat_timeout = 5s;
    config_.last_call_timeout = 60s;
    config_.barrier_timeout = 60s;
  }
  ~Job() {
    for (auto& n : nodes_) n->abandon();
    server_->stop();
    io_.run_for(1s);
  }

  RendezvousConfig& config() { return config_; }
  asio::io_context& io() { return io_; }
  uint16_t port() const { return server_->port(); }
  // SIGKILL and restart of the store, as one step: every connection drops, and the new server on
  // the same port knows no key.
  void restart_store() {
    const uint16_t port = server_->port();
    server_->stop();
    server_.reset();
    ServerOptions o = loopback();
    o.port = port;
    server_.emplace(io_, o);
  }
  // A client of the store, for looking at what it holds.
  std::unique_ptr<AsyncStoreClient> client() {
    return run(AsyncStoreClient::connect(io_.get_executor(), "127.0.0.1", port()));
  }

  // A node that has joined the job.
  std::shared_ptr<Rendezvous> add(int nproc = 1) {
    RendezvousConfig c = config_;
    c.nproc = nproc;
    c.host = "h" + std::to_string(nodes_.size());
    auto node = make_rendezvous(io_, c);
    run(completed(node->join()));
    nodes_.push_back(node);
    return node;
  }
  // Adds an already-built handler, joined, to those torn down at the end.
  void adopt(std::shared_ptr<Rendezvous> node) {
    run(completed(node->join()));
    nodes_.push_back(node);
  }

  template <class T>
  std::shared_ptr<Pending<T>> start(asio::awaitable<T> op) {
    return start_on(io_, std::move(op));
  }
  template <class Pred>
  bool run_until(Pred pred) {
    return rendezvous_test::run_until(io_, pred);
  }
  template <class T>
  T run(asio::awaitable<T> op) {
    return run_on(io_, std::move(op));
  }
  // Runs the io_context for `d`, for checks that something does not happen.
  void idle_for(std::chrono::milliseconds d) { io_.run_for(d); }
  // Bytes the store has sent to its clients so far.
  uint64_t bytes_sent() const { return server_->counters().bytes_sent; }
  // The id of the agent that leads the rendezvous, as the store holds it.
  std::string leader() {
    auto c = client();
    std::string id = run(c->get(TcpJobStore::job_key("job", "leader")));
    c->close();
    return id;
  }

 private:
  static ServerOptions loopback() {
    ServerOptions o;
    o.host = "127.0.0.1";
    return o;
  }

  asio::io_context io_;
  std::optional<StoreServer> server_;
  RendezvousConfig config_;
  std::vector<std::shared_ptr<Rendezvous>> nodes_;
};

inline const std::string& id_of(const std::shared_ptr<Rendezvous>& node) {
  const auto* elastic = dynamic_cast<ElasticRendezvous*>(node.get());
  REQUIRE(elastic != nullptr);
  return elastic->node_id();
}

// Starts next_round() on every node and returns their rounds once all have one.
inline std::vector<Round> form(Job& job, const std::vector<std::shared_ptr<Rendezvous>>& nodes) {
  std::vector<std::shared_ptr<Pending<std::optional<Round>>>> pending;
  for (auto& n : nodes) pending.push_back(job.start(n->next_round()));
  REQUIRE(job.run_until([&] {
    for (auto& p : pending) {
      if (!p->done) return false;
    }
    return true;
  }));
  std::vector<Round> rounds;
  for (auto& p : pending) {
    const auto r = p->get();
    REQUIRE(r.has_value());
    rounds.push_back(*r);
  }
  return rounds;
}

// Every node's reported failures (agent/src/exchanges/failure_reports.hpp, what the agent does
// on a failure) in the round that had restart count `restart_count`, sorted.
inline std::vector<std::string> failures_of(Job& job, const std::shared_ptr<Rendezvous>& node,
                                            int restart_count) {
  auto out = job.run(failure_reports::reported(node, restart_count));
  std::sort(out.begin(), out.end());
  return out;
}

// Of a two-node round: the index of the node that is node rank 0, then the other's.
inline std::pair<int, int> node_zero_first(const std::vector<Round>& rounds) {
  return rounds[0].node_rank == 0 ? std::pair{0, 1} : std::pair{1, 0};
}

}  // namespace rendezvous_test
