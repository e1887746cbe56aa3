#include "ddprun/rendezvous/elastic_rendezvous.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/errors.hpp"
#include "ddprun/rendezvous/local_address.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

ElasticRendezvous::ElasticRendezvous(asio::io_context& io, RendezvousConfig config,
                                     std::string node_id, std::shared_ptr<JobStore> store,
                                     std::unique_ptr<StoreThread> server)
    : JobSession(io.get_executor(), std::move(store)),
      io_(io),
      config_(std::move(config)),
      node_id_(std::move(node_id)),
      server_(std::move(server)) {}

std::shared_ptr<ElasticRendezvous> ElasticRendezvous::create(asio::io_context& io,
                                                             RendezvousConfig config,
                                                             std::string node_id,
                                                             std::shared_ptr<JobStore> store,
                                                             std::unique_ptr<StoreThread> server) {
  return std::shared_ptr<ElasticRendezvous>(new ElasticRendezvous(
      io, std::move(config), std::move(node_id), std::move(store), std::move(server)));
}

ElasticRendezvous::~ElasticRendezvous() = default;

namespace {

// (Outside the coroutines: g++ 12 miscompiles braced initializer lists inside one.)
JobSession::Settings job_wide(const RendezvousConfig& c) {
  return {{"--nnodes", fmt::format("{}:{}", c.min_nodes, c.max_nodes)},
          {"--max_restarts", std::to_string(c.max_restarts)}};
}

}  // namespace

asio::awaitable<void> ElasticRendezvous::join() {
  Settings settings = job_wide(config_);
  co_await agree_on(std::move(settings));
  co_await open("nodes/" + node_id_, node_record(config_.nproc, config_.host));
  // Counters start at 0 (the first node creates them): compare-and-set never creates a key whose
  // expected value is not empty.
  const std::string round = co_await store().compare_set("round", "", "0");
  round_ = std::max(round_, std::stoi(round));
  const std::string restarts = co_await store().compare_set("restarts", "", "0");
  restarts_ = std::max(restarts_, std::stoi(restarts));
}

ElasticRendezvous::Record ElasticRendezvous::parse_record(const std::string& json) {
  const auto j = nlohmann::json::parse(json);
  Record r;
  r.participants = j.at("participants").get<std::vector<std::string>>();
  r.nproc = j.at("nproc").get<std::vector<int>>();
  r.restarts = j.value("restarts", 0);
  return r;
}

void ElasticRendezvous::on_event(const KeyEvent& e) {
  const std::string& k = e.key;
  if (k.starts_with("nodes/")) {
    const std::string id = k.substr(6);
    if (e.deleted) {
      nodes_.erase(id);
    } else {
      nodes_[id] = nproc_of_record(e.value);
    }
  } else if (e.deleted) {
    return;
  } else if (k == "round") {
    round_ = std::max(round_, std::stoi(e.value));
  } else if (k == "restarts") {
    restarts_ = std::max(restarts_, std::stoi(e.value));
  } else if (k == "closed") {
    closed_ = e.value;
  } else if (k.starts_with("rounds/")) {
    rounds_[std::stoi(k.substr(7))] = parse_record(e.value);
  } else if (k.starts_with("masters/")) {
    masters_[std::stoi(k.substr(8))] = e.value;
  } else if (k.starts_with("done/")) {
    const auto slash = k.find('/', 5);
    done_[std::stoi(k.substr(5, slash - 5))].insert(k.substr(slash + 1));
  }
}

// Survivors of the previous round keep their order (stable node ranks); newcomers follow in id
// order; the rest are spares.
std::string ElasticRendezvous::propose(int round) const {
  std::vector<std::string> chosen;
  if (auto prev = rounds_.find(round - 1); prev != rounds_.end()) {
    for (const auto& id : prev->second.participants) {
      if (nodes_.contains(id)) chosen.push_back(id);
    }
  }
  for (const auto& [id, _] : nodes_) {
    if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
  }
  if (static_cast<int>(chosen.size()) > config_.max_nodes) chosen.resize(config_.max_nodes);
  std::vector<int> nproc;
  for (const auto& id : chosen) nproc.push_back(nodes_.at(id));
  nlohmann::json j;
  j["participants"] = chosen;
  j["nproc"] = nproc;
  j["restarts"] = restarts_;
  return j.dump();
}

bool ElasticRendezvous::ended(bool ran) {
  if (!closed_) return false;
  if (*closed_ == "failed") {
    ending_ = JobEnd{JobEnd::Kind::kRestartsExhausted, "no restarts remain"};
  } else if (*closed_ == "succeeded" && ran) {
    ending_ = JobEnd{JobEnd::Kind::kSucceeded, *closed_};
  } else {
    ending_ = JobEnd{JobEnd::Kind::kClosed, *closed_};
  }
  return true;
}

asio::awaitable<std::optional<Round>> ElasticRendezvous::next_round() {
  clear_expelled();
  for (;;) {
    if (restarts_ > config_.max_restarts && !closed_) co_await close("failed");
    if (ended(ran_)) co_return std::nullopt;
    // Expelled (paused, cut off): the store gives this node its presence back; it is a newcomer.
    if (!present() && !co_await wait_until([this] { return present() || closed_.has_value(); },
                                           Clock::now() + config_.join_timeout)) {
      throw StoreTimeout(fmt::format("this node could not rejoin the job within {} s",
                                     config_.join_timeout.count() / 1000));
    }
    const int n = round_;
    const auto settled = [this, n] { return closed_ || round_ != n || rounds_.contains(n); };
    if (!rounds_.contains(n)) {
      const bool enough = co_await wait_until(
          [&] { return settled() || static_cast<int>(nodes_.size()) >= config_.min_nodes; },
          Clock::now() + config_.join_timeout);
      if (!enough) {
        throw StoreTimeout(fmt::format("only {} of at least {} nodes joined within {} s",
                                       nodes_.size(), config_.min_nodes,
                                       config_.join_timeout.count() / 1000));
      }
      if (settled()) continue;
      // The last call gathers the first round: more nodes may come until MAX or last_call_timeout.
      // A re-formed round (after a node left or failed) starts at once; late arrivals scale it up.
      if (!rounds_.contains(n - 1)) {
        co_await wait_until(
            [&] { return settled() || static_cast<int>(nodes_.size()) >= config_.max_nodes; },
            Clock::now() + config_.last_call_timeout);
      }
      if (settled()) continue;
      if (static_cast<int>(nodes_.size()) < config_.min_nodes) continue;
      const std::string key = fmt::format("rounds/{}", n);
      const std::string proposal = propose(n);
      const std::string decided = co_await store().compare_set(key, "", proposal);
      rounds_[n] = parse_record(decided);
    }
    const Record rec = rounds_.at(n);
    const auto me = std::find(rec.participants.begin(), rec.participants.end(), node_id_);
    if (me == rec.participants.end()) {
      spdlog::info("round {} is full ({} nodes): waiting as a spare", n, rec.participants.size());
      co_await wait_until([&] { return closed_ || round_ > n; }, Clock::time_point::max());
      continue;
    }
    Round r;
    r.number = n;
    r.restart_count = rec.restarts;
    r.node_rank = static_cast<int>(me - rec.participants.begin());
    r.num_nodes = static_cast<int>(rec.participants.size());
    r.members = rec.participants;
    for (int i = 0; i < r.num_nodes; ++i) {
      if (i < r.node_rank) r.base_rank += rec.nproc[i];
      r.world_size += rec.nproc[i];
    }
    ran_ = true;
    co_return r;
  }
}

asio::awaitable<WorkerStoreAddress> ElasticRendezvous::worker_store(Round r) {
  // Every round gets a fresh worker store on a live node: no stale MASTER_ADDR, no stale keys.
  if (r.node_rank == 0) {
    round_server_.reset();
    ServerOptions options;
    options.expected_clients = static_cast<size_t>(r.world_size) * 2;  // torch 1.13: 2 each
    round_server_ = std::make_unique<StoreThread>(options);
    const std::string addr =
        config_.local_addr.empty()
            ? local_address_towards(config_.endpoint_host, config_.endpoint_port)
            : config_.local_addr;
    const std::string key = fmt::format("masters/{}", r.number);
    const std::string value = fmt::format("{}:{}", addr, round_server_->port());
    co_await store().set(key, value);
  }
  const bool known = co_await wait_until([&] { return masters_.contains(r.number); },
                                         Clock::now() + config_.join_timeout);
  if (!known) throw StoreTimeout("the round's node 0 did not publish its worker store");
  const std::string& v = masters_.at(r.number);
  const auto colon = v.rfind(':');
  co_return WorkerStoreAddress{v.substr(0, colon), std::stoi(v.substr(colon + 1))};
}

asio::awaitable<std::string> ElasticRendezvous::interruption(Round r) {
  clear_stop_request();
  const std::vector<std::string> participants = rounds_.at(r.number).participants;
  std::string why;
  co_await wait_until(
      [&] {
        if (stop_requested()) return true;
        if (expelled()) return !(why = kExpelledReason).empty();
        if (closed_) return !(why = "the job was closed: " + *closed_).empty();
        if (round_ > r.number) return !(why = "another node's workers failed").empty();
        for (const auto& id : participants) {
          if (!nodes_.contains(id)) {
            why = fmt::format("node {} left the job (its agent died or was cut off)", id);
            return true;
          }
        }
        if (r.num_nodes < config_.max_nodes && nodes_.size() > participants.size()) {
          why = "a new node is waiting to join (scale-up)";
          return true;
        }
        return false;
      },
      Clock::time_point::max());
  co_return why;
}

asio::awaitable<void> ElasticRendezvous::advance_round(int number, bool failed, int restarts) {
  if (failed) {
    const std::string now = co_await store().compare_set("restarts", std::to_string(restarts),
                                                         std::to_string(restarts + 1));
    restarts_ = std::max(restarts_, std::stoi(now));
  }
  const std::string now =
      co_await store().compare_set("round", std::to_string(number), std::to_string(number + 1));
  round_ = std::max(round_, std::stoi(now));
  notify();
}

asio::awaitable<void> ElasticRendezvous::end_round(Round r) {
  co_await advance_round(r.number, false, r.restart_count);
}

asio::awaitable<void> ElasticRendezvous::report_failure(Round r, std::string failures) {
  const std::string key = fmt::format("failures/{}/{}", r.restart_count, node_id_);
  co_await store().set(key, failures);
  co_await advance_round(r.number, true, r.restart_count);
}

asio::awaitable<std::vector<std::string>> ElasticRendezvous::final_failures() {
  // The failure that spent the last restart was recorded under restart count max_restarts.
  const std::string prefix = fmt::format("failures/{}/", config_.max_restarts);
  std::vector<std::string> out;
  for (auto& e : co_await store().read_prefix(prefix)) out.push_back(std::move(e.value));
  co_return out;
}

asio::awaitable<bool> ElasticRendezvous::exit_barrier(Round r) {
  const std::string key = fmt::format("done/{}/{}", r.number, node_id_);
  co_await store().set(key, "1");
  const std::vector<std::string> participants = rounds_.at(r.number).participants;
  const auto is_done = [&](const std::string& id) { return done_[r.number].contains(id); };
  const auto all_done = [&] {
    return std::all_of(participants.begin(), participants.end(), is_done);
  };
  // A peer whose agent is gone before it said done never will: fail now, not at the timeout.
  const auto peer_lost = [&] {
    return std::any_of(participants.begin(), participants.end(),
                       [&](const std::string& id) { return !nodes_.contains(id) && !is_done(id); });
  };
  co_await wait_until(
      [&] { return all_done() || round_ > r.number || closed_.has_value() || peer_lost(); },
      Clock::now() + config_.barrier_timeout);
  co_return all_done();
}

asio::awaitable<void> ElasticRendezvous::close(std::string why) {
  closed_ = co_await store().compare_set("closed", "", why);
  ended(ran_);
  notify();
}

asio::awaitable<void> ElasticRendezvous::leave(bool graceful) {
  if (graceful && server_) {
    try {  // the store lives in this agent: it stays until the others have read the outcome
      co_await wait_until(
          [this] {
            return std::all_of(nodes_.begin(), nodes_.end(),
                               [this](const auto& n) { return n.first == node_id_; });
          },
          Clock::now() +
              std::min<std::chrono::milliseconds>(config_.join_timeout, std::chrono::seconds(30)));
    } catch (const std::exception&) {
    }
  }
  abandon();
}

std::string ElasticRendezvous::describe() const {
  if (config_.backend == Backend::kEtcdV3) {
    return fmt::format(
        "elastic {}:{} nodes, etcd at {} endpoint(s) from {}:{}, over its v3 API (etcd 3.4 and "
        "later)",
        config_.min_nodes, config_.max_nodes, config_.etcd_endpoints.size(), config_.endpoint_host,
        config_.endpoint_port);
  }
  return fmt::format("elastic {}:{} nodes, store {}:{}{}", config_.min_nodes, config_.max_nodes,
                     config_.endpoint_host, config_.endpoint_port, server_ ? " (hosted here)" : "");
}

void ElasticRendezvous::abandon() {
  leave_store();
  if (round_server_) round_server_->stop();
  if (server_) server_->stop();
}

}  // namespace ddprun::rendezvous
