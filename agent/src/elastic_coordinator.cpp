#include "ddprun/agent/elastic_coordinator.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/errors.hpp"
#include "failure_json.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using rendezvous::WatchEventRecord;
using rendezvous::wire::WatchEvent;

ElasticCoordinator::ElasticCoordinator(asio::any_io_executor ex, ElasticSpec spec)
    : JobSession(ex, spec.session), spec_(std::move(spec)) {}

asio::awaitable<std::shared_ptr<ElasticCoordinator>> ElasticCoordinator::join(
    asio::any_io_executor ex, ElasticSpec spec) {
  std::shared_ptr<ElasticCoordinator> c(new ElasticCoordinator(ex, std::move(spec)));
  co_await c->open("nodes/" + c->spec_.node_id, node_record(c->spec_.nproc, c->spec_.host));
  // Counters start at 0 (the first node creates them): compare-and-set never creates a key whose
  // expected value is not empty.
  const std::string round = co_await c->client().compare_set(c->key("round"), "", "0");
  c->round_ = std::max(c->round_, std::stoi(round));
  const std::string restarts = co_await c->client().compare_set(c->key("restarts"), "", "0");
  c->restarts_ = std::max(c->restarts_, std::stoi(restarts));
  co_return c;
}

ElasticCoordinator::Record ElasticCoordinator::parse_record(const std::string& json) {
  const auto j = nlohmann::json::parse(json);
  Record r;
  r.participants = j.at("participants").get<std::vector<std::string>>();
  r.nproc = j.at("nproc").get<std::vector<int>>();
  r.restarts = j.value("restarts", 0);
  return r;
}

void ElasticCoordinator::on_event(const std::string& k, const WatchEventRecord& e) {
  const bool gone = e.event == WatchEvent::kKeyDeleted;
  if (k.starts_with("nodes/")) {
    const std::string id = k.substr(6);
    if (gone) {
      nodes_.erase(id);
    } else {
      nodes_[id] = nlohmann::json::parse(e.new_value).value("nproc", 1);
    }
  } else if (gone) {
    return;
  } else if (k == "round") {
    round_ = std::max(round_, std::stoi(e.new_value));
  } else if (k == "restarts") {
    restarts_ = std::max(restarts_, std::stoi(e.new_value));
  } else if (k == "closed") {
    closed_ = e.new_value;
  } else if (k.starts_with("rounds/")) {
    rounds_[std::stoi(k.substr(7))] = parse_record(e.new_value);
  } else if (k.starts_with("masters/")) {
    masters_[std::stoi(k.substr(8))] = e.new_value;
  } else if (k.starts_with("done/")) {
    const auto slash = k.find('/', 5);
    done_[std::stoi(k.substr(5, slash - 5))].insert(k.substr(slash + 1));
  }
}

// Survivors of the previous round keep their order (stable node ranks); newcomers follow in id
// order; the rest are spares.
std::string ElasticCoordinator::propose(int round) const {
  std::vector<std::string> chosen;
  if (auto prev = rounds_.find(round - 1); prev != rounds_.end()) {
    for (const auto& id : prev->second.participants) {
      if (nodes_.contains(id)) chosen.push_back(id);
    }
  }
  for (const auto& [id, _] : nodes_) {
    if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
  }
  if (static_cast<int>(chosen.size()) > spec_.max_nodes) chosen.resize(spec_.max_nodes);
  std::vector<int> nproc;
  for (const auto& id : chosen) nproc.push_back(nodes_.at(id));
  nlohmann::json j;
  j["participants"] = chosen;
  j["nproc"] = nproc;
  j["restarts"] = restarts_;
  return j.dump();
}

asio::awaitable<std::optional<ElasticRound>> ElasticCoordinator::next_round() {
  for (;;) {
    if (closed_) co_return std::nullopt;
    const int n = round_;
    const auto settled = [this, n] { return closed_ || round_ != n || rounds_.contains(n); };
    if (!rounds_.contains(n)) {
      const bool enough = co_await wait_until(
          [&] { return settled() || static_cast<int>(nodes_.size()) >= spec_.min_nodes; },
          Clock::now() + spec_.session.join_timeout);
      if (!enough) {
        throw rendezvous::StoreTimeout(
            fmt::format("only {} of at least {} nodes joined within {} s", nodes_.size(),
                        spec_.min_nodes, spec_.session.join_timeout.count() / 1000));
      }
      if (settled()) continue;
      // The last call gathers the first round: more nodes may come until MAX or last_call_timeout.
      // A re-formed round (after a node left or failed) starts at once; late arrivals scale it up.
      if (!rounds_.contains(n - 1)) {
        co_await wait_until(
            [&] { return settled() || static_cast<int>(nodes_.size()) >= spec_.max_nodes; },
            Clock::now() + spec_.last_call_timeout);
      }
      if (settled()) continue;
      if (static_cast<int>(nodes_.size()) < spec_.min_nodes) continue;
      const std::string decided =
          co_await client().compare_set(key(fmt::format("rounds/{}", n)), "", propose(n));
      rounds_[n] = parse_record(decided);
    }
    const Record rec = rounds_.at(n);
    const auto me = std::find(rec.participants.begin(), rec.participants.end(), spec_.node_id);
    if (me == rec.participants.end()) {
      spdlog::info("round {} is full ({} nodes): waiting as a spare", n, rec.participants.size());
      co_await wait_until([&] { return closed_ || round_ > n; }, Clock::time_point::max());
      continue;
    }
    ElasticRound r;
    r.number = n;
    r.node_rank = static_cast<int>(me - rec.participants.begin());
    r.num_nodes = static_cast<int>(rec.participants.size());
    r.restarts = rec.restarts;
    r.participants = rec.participants;
    for (int i = 0; i < r.num_nodes; ++i) {
      if (i < r.node_rank) r.base_rank += rec.nproc[i];
      r.world_size += rec.nproc[i];
    }
    co_return r;
  }
}

asio::awaitable<void> ElasticCoordinator::publish_master(const ElasticRound& r,
                                                         const std::string& addr, int port) {
  co_await client().set(key(fmt::format("masters/{}", r.number)), fmt::format("{}:{}", addr, port));
}

asio::awaitable<std::pair<std::string, int>> ElasticCoordinator::master(const ElasticRound& r) {
  const bool known = co_await wait_until([&] { return masters_.contains(r.number); },
                                         Clock::now() + spec_.session.join_timeout);
  if (!known) throw rendezvous::StoreTimeout("round's node 0 did not publish its worker store");
  const std::string& v = masters_.at(r.number);
  const auto colon = v.rfind(':');
  co_return std::pair{v.substr(0, colon), std::stoi(v.substr(colon + 1))};
}

asio::awaitable<std::string> ElasticCoordinator::membership_event(ElasticRound r) {
  clear_stop_request();
  std::string why;
  co_await wait_until(
      [&] {
        if (stop_requested()) return true;
        if (closed_) return !(why = "the job was closed: " + *closed_).empty();
        if (round_ > r.number) return !(why = "another node's workers failed").empty();
        for (const auto& id : r.participants) {
          if (!nodes_.contains(id)) {
            why = fmt::format("node {} left the job (its agent died or was cut off)", id);
            return true;
          }
        }
        if (r.num_nodes < spec_.max_nodes && nodes_.size() > r.participants.size()) {
          why = "a new node is waiting to join (scale-up)";
          return true;
        }
        return false;
      },
      Clock::time_point::max());
  co_return why;
}

asio::awaitable<void> ElasticCoordinator::end_round(const ElasticRound& r, bool failed) {
  if (failed) {
    const std::string now = co_await client().compare_set(
        key("restarts"), std::to_string(r.restarts), std::to_string(r.restarts + 1));
    restarts_ = std::max(restarts_, std::stoi(now));
  }
  const std::string now = co_await client().compare_set(key("round"), std::to_string(r.number),
                                                        std::to_string(r.number + 1));
  round_ = std::max(round_, std::stoi(now));
  notify();
}

asio::awaitable<void> ElasticCoordinator::report_failure(
    const ElasticRound& r, const std::vector<WorkerFailure>& failures) {
  co_await client().set(key(fmt::format("failures/{}/{}", r.restarts, spec_.node_id)),
                        failures_to_json(failures));
  co_await end_round(r, true);
}

asio::awaitable<std::vector<WorkerFailure>> ElasticCoordinator::failures(int restarts) {
  const std::vector<std::string> ids = co_await client().list_keys();
  const std::string prefix = key(fmt::format("failures/{}/", restarts));
  std::vector<std::string> keys;
  for (const auto& k : ids) {
    if (k.starts_with(prefix)) keys.push_back(k);
  }
  std::vector<WorkerFailure> out;
  for (const auto& v : co_await client().multi_get(keys)) {
    for (auto& f : failures_from_json(v)) out.push_back(std::move(f));
  }
  co_return out;
}

asio::awaitable<bool> ElasticCoordinator::exit_barrier(const ElasticRound& r) {
  co_await client().set(key(fmt::format("done/{}/{}", r.number, spec_.node_id)), "1");
  const auto all_done = [&] {
    return std::all_of(r.participants.begin(), r.participants.end(),
                       [&](const std::string& id) { return done_[r.number].contains(id); });
  };
  co_await wait_until([&] { return all_done() || round_ > r.number || closed_.has_value(); },
                      Clock::now() + spec_.barrier_timeout);
  co_return all_done();
}

asio::awaitable<void> ElasticCoordinator::close(const std::string& why) {
  const std::string now = co_await client().compare_set(key("closed"), "", why);
  closed_ = now;
  notify();
}

asio::awaitable<void> ElasticCoordinator::outlast_peers(std::chrono::milliseconds limit) {
  co_await wait_until(
      [this] {
        return std::all_of(nodes_.begin(), nodes_.end(),
                           [this](const auto& n) { return n.first == spec_.node_id; });
      },
      Clock::now() + limit);
}

}  // namespace ddprun::agent
