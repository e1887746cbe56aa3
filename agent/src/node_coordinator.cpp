#include "ddprun/agent/node_coordinator.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/errors.hpp"
#include "failure_json.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using rendezvous::WatchEventRecord;
using rendezvous::wire::WatchEvent;

NodeCoordinator::NodeCoordinator(asio::any_io_executor ex, NodeSpec spec)
    : JobSession(ex, SessionSpec{spec.run_id, spec.store_host, spec.store_port, spec.join_timeout,
                                 spec.heartbeat_timeout}),
      spec_(std::move(spec)) {}

asio::awaitable<std::shared_ptr<NodeCoordinator>> NodeCoordinator::join(asio::any_io_executor ex,
                                                                        NodeSpec spec) {
  std::shared_ptr<NodeCoordinator> c(new NodeCoordinator(ex, std::move(spec)));
  co_await c->open(fmt::format("nodes/{}", c->spec_.node_rank),
                   node_record(c->spec_.nproc, c->spec_.host));
  // The first node to get here starts the job at attempt 0; the others read what is there.
  const std::string attempt = co_await c->client().compare_set(c->key("attempt"), "", "0");
  c->attempt_ = std::max(c->attempt_, std::stoi(attempt));
  co_return c;
}

void NodeCoordinator::on_event(const std::string& k, const WatchEventRecord& e) {
  const bool gone = e.event == WatchEvent::kKeyDeleted;
  if (k.starts_with("nodes/")) {
    const int rank = std::stoi(k.substr(6));
    if (gone) {
      nodes_.erase(rank);
    } else {
      nodes_[rank] = nlohmann::json::parse(e.new_value).value("nproc", 1);
    }
  } else if (k == "attempt" && !gone) {
    attempt_ = std::max(attempt_, std::stoi(e.new_value));
  } else if (k.starts_with("done/") && !gone) {
    const auto slash = k.find('/', 5);
    done_[std::stoi(k.substr(5, slash - 5))].insert(std::stoi(k.substr(slash + 1)));
  }
}

asio::awaitable<NodePlacement> NodeCoordinator::placement() {
  auto all_present = [this] {
    for (int r = 0; r < spec_.num_nodes; ++r) {
      if (!nodes_.contains(r)) return false;
    }
    return true;
  };
  if (!co_await wait_until(all_present, Clock::now() + spec_.join_timeout)) {
    std::vector<int> missing;
    for (int r = 0; r < spec_.num_nodes; ++r) {
      if (!nodes_.contains(r)) missing.push_back(r);
    }
    throw rendezvous::StoreTimeout(fmt::format("node ranks {} did not join within {} s", missing,
                                               spec_.join_timeout.count() / 1000));
  }
  NodePlacement p;
  p.attempt = attempt_;
  for (int r = 0; r < spec_.num_nodes; ++r) {
    if (r < spec_.node_rank) p.base_rank += nodes_.at(r);
    p.world_size += nodes_.at(r);
  }
  co_return p;
}

asio::awaitable<std::string> NodeCoordinator::peer_event(int attempt) {
  clear_stop_request();
  std::string reason;
  co_await wait_until(
      [&] {
        if (stop_requested()) return true;
        if (attempt_ > attempt) {
          reason = "another node's workers failed";
          return true;
        }
        for (int r = 0; r < spec_.num_nodes; ++r) {
          if (!nodes_.contains(r)) {
            reason = fmt::format("node {} left the job (its agent died or was cut off)", r);
            return true;
          }
        }
        return false;
      },
      Clock::time_point::max());
  co_return reason;
}

asio::awaitable<void> NodeCoordinator::outlast_peers(std::chrono::milliseconds limit) {
  co_await wait_until(
      [this] {
        return std::all_of(nodes_.begin(), nodes_.end(),
                           [this](const auto& n) { return n.first == spec_.node_rank; });
      },
      Clock::now() + limit);
}

asio::awaitable<void> NodeCoordinator::advance(int attempt) {
  const std::string now = co_await client().compare_set(key("attempt"), std::to_string(attempt),
                                                        std::to_string(attempt + 1));
  attempt_ = std::max(attempt_, std::stoi(now));
  notify();
}

asio::awaitable<void> NodeCoordinator::report_failure(int attempt,
                                                      const std::vector<WorkerFailure>& failures) {
  co_await client().set(key(fmt::format("failures/{}/{}", attempt, spec_.node_rank)),
                        failures_to_json(failures));
  co_await advance(attempt);
}

asio::awaitable<std::vector<WorkerFailure>> NodeCoordinator::failures(int attempt) {
  std::vector<std::string> keys;
  for (int r = 0; r < spec_.num_nodes; ++r)
    keys.push_back(key(fmt::format("failures/{}/{}", attempt, r)));
  std::vector<WorkerFailure> out;
  for (const auto& v : co_await client().multi_get(keys)) {
    for (auto& f : failures_from_json(v)) out.push_back(std::move(f));
  }
  co_return out;
}

asio::awaitable<bool> NodeCoordinator::exit_barrier(int attempt) {
  co_await client().set(key(fmt::format("done/{}/{}", attempt, spec_.node_rank)), "1");
  const auto all_done = [&] {
    return static_cast<int>(done_[attempt].size()) == spec_.num_nodes || attempt_ > attempt;
  };
  co_await wait_until(all_done, Clock::now() + spec_.barrier_timeout);
  co_return static_cast<int>(done_[attempt].size()) == spec_.num_nodes;
}

}  // namespace ddprun::agent
