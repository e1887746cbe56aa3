#include "static_rendezvous.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "ddprun/job_store/tcp_job_store.hpp"
#include "ddprun/rendezvous/job_records.hpp"
#include "ddprun/store/errors.hpp"
#include "job_keys.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

StaticRendezvous::StaticRendezvous(asio::io_context& io, RendezvousConfig config,
                                   std::shared_ptr<JobStore> store,
                                   std::unique_ptr<store::StoreThread> server,
                                   std::unique_ptr<store::StoreThread> worker_server)
    : JobSession(io.get_executor(), std::move(store)),
      config_(std::move(config)),
      server_(std::move(server)),
      worker_server_(std::move(worker_server)) {}

namespace {

// (Outside the coroutines: g++ 12 miscompiles braced initializer lists inside one.)
JobSession::Settings static_settings(const RendezvousConfig& c) {
  return {{"--nnodes", std::to_string(c.max_nodes)},
          {"--max_restarts", std::to_string(c.max_restarts)}};
}

}  // namespace

std::shared_ptr<StaticRendezvous> StaticRendezvous::create(
    asio::io_context& io, RendezvousConfig config, std::shared_ptr<JobStore> store,
    std::unique_ptr<store::StoreThread> server) {
  // Node 0 hosts the store, so its settings are the job's: written before any peer can connect,
  // they are there for every peer's check (a peer that connected first would otherwise fix them).
  std::unique_ptr<store::StoreThread> worker_server;
  if (server) {
    std::vector<std::pair<std::string, std::string>> first = {
        {std::string(keys::kSettings), records::settings_text(static_settings(config))}};
    if (config.auth_token) {
      worker_server = std::make_unique<store::StoreThread>(store::ServerOptions{});
      first.emplace_back(keys::kMaster, std::to_string(worker_server->port()));
    }
    server->call([&](store::StoreServer& s) {
      for (const auto& [key, value] : first) {
        s.store().set(TcpJobStore::server_key(config.run_id, key), value);
      }
    });
  }
  return std::shared_ptr<StaticRendezvous>(new StaticRendezvous(
      io, std::move(config), std::move(store), std::move(server), std::move(worker_server)));
}

StaticRendezvous::~StaticRendezvous() = default;

asio::awaitable<void> StaticRendezvous::join() {
  Settings settings = static_settings(config_);
  co_await agree_on(std::move(settings));
  // Every node follows every key: a static job waits for each node rank by name.
  WatchSet everything;
  everything.prefixes.push_back("");
  co_await open(keys::key(keys::kNodes, config_.node_rank),
                records::node_text(config_.nproc, config_.host), std::move(everything));
  // The first node to get here starts the job at attempt 0; the others read what is there.
  const std::string attempt = co_await store().compare_set(std::string(keys::kAttempt), "", "0");
  attempt_ = std::max(attempt_, std::stoi(attempt));
}

void StaticRendezvous::on_event(const KeyEvent& e) {
  const std::string& k = e.key;
  if (k.starts_with(keys::kNodes)) {
    const int rank = std::stoi(std::string(keys::after(k, keys::kNodes)));
    if (e.deleted) {
      nodes_.erase(rank);
    } else {
      nodes_[rank] = nproc_of_record(e.value);
    }
  } else if (k == keys::kMaster && !e.deleted) {
    try {
      worker_port_ = std::stoi(e.value);
    } catch (const std::exception&) {  // not written by an agent: nothing to act on
    }
  } else if (k == keys::kAttempt && !e.deleted) {
    attempt_ = std::max(attempt_, std::stoi(e.value));
  } else if (k.starts_with(keys::kDone) && !e.deleted) {
    const auto [n, node] = keys::round_and_node(keys::after(k, keys::kDone));
    done_[n].insert(std::stoi(node));
  }
}

asio::awaitable<std::optional<Round>> StaticRendezvous::next_round() {
  const int n = config_.max_nodes;
  const auto all_present = [this, n] {
    for (int r = 0; r < n; ++r) {
      if (!present(r)) return false;
    }
    return true;
  };
  const auto exhausted = [this] {
    if (attempt_ <= config_.max_restarts) return false;
    ending_ = JobEnd{JobEnd::Kind::kRestartsExhausted, "no restarts remain"};
    return true;
  };
  // The budget is checked before waiting for the nodes (those that failed may have left) and again
  // after (a peer may have spent it meanwhile).
  if (exhausted()) co_return std::nullopt;
  clear_expelled();
  const auto stopped = [this] { return peer_job_flag().has_value(); };
  if (!co_await wait_until([&] { return all_present() || stopped(); },
                           Clock::now() + config_.join_timeout)) {
    std::vector<int> missing;
    for (int r = 0; r < n; ++r) {
      if (!present(r)) missing.push_back(r);
    }
    throw store::StoreTimeout(fmt::format("node ranks {} did not join within {} s", missing,
                                          config_.join_timeout.count() / 1000));
  }
  if (stopped()) {  // a peer ended the job (it was stopped by a signal)
    ending_ = JobEnd{JobEnd::Kind::kClosed, peer_job_flag()->reason};
    co_return std::nullopt;
  }
  if (exhausted()) co_return std::nullopt;
  Round r;
  r.number = attempt_;
  r.restart_count = attempt_;
  r.node_rank = config_.node_rank;
  r.num_nodes = n;
  for (int i = 0; i < n; ++i) {
    if (i < config_.node_rank) r.base_rank += nodes_.at(i);
    r.world_size += nodes_.at(i);
    r.members.push_back(std::to_string(i));
  }
  co_return r;
}

asio::awaitable<std::optional<WorkerStoreAddress>> StaticRendezvous::worker_store(Round) {
  // torchrun's static rendezvous: the workers use the job's store, node 0's; with a token, the
  // store node 0 hosts for them beside it.
  if (!config_.auth_token) co_return WorkerStoreAddress{config_.master_addr, config_.store_port};
  if (!co_await wait_until([this] { return worker_port_ != 0; },
                           Clock::now() + config_.join_timeout)) {
    throw store::StoreTimeout("node 0 did not publish the workers' store");
  }
  co_return WorkerStoreAddress{config_.master_addr, worker_port_};
}

asio::awaitable<std::string> StaticRendezvous::interruption(Round r) {
  clear_stop_request();
  std::string reason;
  co_await wait_until(
      [&] {
        if (stop_requested()) return true;
        if (expelled()) {
          reason = kExpelledReason;
          return true;
        }
        if (const auto flag = peer_flag(r)) {
          reason = flag->reason;
          return true;
        }
        if (attempt_ > r.number) {
          reason = "another node's workers failed";
          return true;
        }
        for (int i = 0; i < r.num_nodes; ++i) {
          if (!present(i)) {
            reason = fmt::format("node {} left the job (its agent died or was cut off)", i);
            return true;
          }
        }
        return false;
      },
      Clock::time_point::max());
  co_return reason;
}

asio::awaitable<void> StaticRendezvous::advance(int attempt) {
  const std::string now = co_await store().compare_set(
      std::string(keys::kAttempt), std::to_string(attempt), std::to_string(attempt + 1));
  attempt_ = std::max(attempt_, std::stoi(now));
  notify();
}

asio::awaitable<void> StaticRendezvous::end_round(Round r, bool) {
  // Failed or not, a restart: a node that left cannot be replaced by another.
  co_await advance(r.number);
}

asio::awaitable<bool> StaticRendezvous::exit_barrier(Round r) {
  co_await store().set(keys::key(keys::kDone, r.number, config_.node_rank), "1");
  const auto all_done = [&] { return static_cast<int>(done_[r.number].size()) == r.num_nodes; };
  // A peer whose agent is gone before it said done never will: fail now, not at the timeout.
  const auto peer_lost = [&] {
    for (int i = 0; i < r.num_nodes; ++i) {
      if (!present(i) && !done_[r.number].contains(i)) return true;
    }
    return false;
  };
  co_await wait_until([&] { return all_done() || attempt_ > r.number || peer_lost(); },
                      Clock::now() + config_.barrier_timeout);
  co_return all_done();
}

asio::awaitable<void> StaticRendezvous::close(std::string why) {
  co_await store().compare_set(std::string(keys::kClosed), "", why);
  ending_ = JobEnd{JobEnd::Kind::kSucceeded, why};
}

asio::awaitable<void> StaticRendezvous::leave(bool graceful) {
  if (graceful && server_) {
    try {  // the store lives in this agent: it stays until the others have read the outcome
      co_await wait_until(
          [this] {
            return std::all_of(nodes_.begin(), nodes_.end(),
                               [this](const auto& n) { return n.first == config_.node_rank; });
          },
          Clock::now() +
              std::min<std::chrono::milliseconds>(config_.join_timeout, std::chrono::seconds(30)));
    } catch (const std::exception&) {
    }
  }
  abandon();
}

std::string StaticRendezvous::describe() const {
  if (server_)
    return fmt::format("node {} of {}, store here on port {}", config_.node_rank, config_.max_nodes,
                       server_->port());
  return fmt::format("node {} of {}, store {}:{}", config_.node_rank, config_.max_nodes,
                     config_.master_addr, config_.store_port);
}

void StaticRendezvous::abandon() {
  leave_store();
  if (server_) server_->stop();
}

}  // namespace ddprun::rendezvous
