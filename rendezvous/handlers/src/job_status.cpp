#include "ddprun/rendezvous/job_status.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/job_store/job_store.hpp"
#include "ddprun/rendezvous/job_records.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/store/errors.hpp"
#include "job_keys.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;

namespace {

// The round a verdict (a JSON object with "round") is of; -1 for anything else.
int round_of(const std::string& verdict) {
  const auto v = nlohmann::json::parse(verdict, nullptr, false);
  return v.is_object() ? v.value("round", -1) : -1;
}

int to_int(const std::string& s, int fallback) {
  try {
    return std::stoi(s);
  } catch (const std::exception&) {
    return fallback;
  }
}

NodeStatus node_of(const std::string& id, const std::string& record) {
  NodeStatus n;
  n.id = id;
  if (const auto node = records::parse_node(record)) {
    n.host = node->host;
    n.nproc = node->nproc;
    n.since_ms = node->since_ms;
  }
  return n;
}

// The restart count of a failure report's key (exchange/restart/<k>/<the topic>/<node>).
std::optional<int> failure_report_restart(std::string_view key) {
  constexpr std::string_view kRestart = "restart/";
  if (!key.starts_with(keys::kExchange)) return std::nullopt;
  std::string_view rest = keys::after(key, keys::kExchange);
  if (!rest.starts_with(kRestart)) return std::nullopt;
  rest = keys::after(rest, kRestart);
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const std::string_view topic = kFailureReportsTopic;
  const std::string_view topic_node = rest.substr(slash + 1);
  if (!topic_node.starts_with(topic) || topic_node.substr(topic.size(), 1) != "/") {
    return std::nullopt;
  }
  return to_int(std::string(rest.substr(0, slash)), -1);
}

// The node of a key of `topic` in the job's scope (exchange/job/<the topic>/<node>).
std::optional<std::string> job_topic_node(std::string_view key, const char* topic) {
  const std::string prefix = std::string(keys::kExchange) + Scope::job().text() + "/" + topic + "/";
  if (!key.starts_with(prefix)) return std::nullopt;
  return std::string(key.substr(prefix.size()));
}

// The job's keys, sorted by what they say.
struct JobKeys {
  std::map<std::string, std::string> present;        // id -> record
  std::map<int, std::string> rounds;                 // elastic: round -> record
  std::map<int, std::vector<std::string>> failures;  // restart count / attempt -> records
  std::map<std::string, std::string> checkpoints;    // id -> its checkpoint account
  std::map<std::string, std::string> restarts;       // id -> its last restart's phases
  int counter = -1;                                  // the round (elastic) or attempt (static)
};

// Sorts `keys` into a JobKeys; what a key says of the job as a whole goes straight into `s`.
JobKeys sort_keys(const std::vector<std::pair<std::string, std::string>>& keys, JobStatus& s) {
  JobKeys k;
  for (const auto& [key, value] : keys) {
    if (key.starts_with(keys::kNodes)) {
      k.present[std::string(keys::after(key, keys::kNodes))] = value;
    } else if (key == keys::kSettings) {
      if (const auto settings = records::parse_settings(value)) {
        if (auto it = settings->find("--nnodes"); it != settings->end()) s.nnodes = it->second;
        if (auto it = settings->find("--max_restarts"); it != settings->end()) {
          s.max_restarts = to_int(it->second, 0);
        }
      }
    } else if (key == keys::kRound || key == keys::kAttempt) {
      k.counter = to_int(value, -1);
    } else if (key == keys::kRestarts) {
      s.restarts = to_int(value, 0);
    } else if (key == keys::kLeader) {
      s.leader = value;
    } else if (key == keys::kClosed) {
      s.closed = true;
      s.closed_reason = value;
    } else if (key.starts_with(keys::kRounds)) {
      k.rounds[to_int(std::string(keys::after(key, keys::kRounds)), -1)] = value;
    } else if (const auto restart = failure_report_restart(key)) {
      k.failures[*restart].push_back(value);
    } else if (const auto node = job_topic_node(key, kCheckpointsTopic)) {
      k.checkpoints[*node] = value;
    } else if (const auto node = job_topic_node(key, kRestartTopic)) {
      k.restarts[*node] = value;
    } else if (job_topic_node(key, kNodeCheckTopic)) {
      // The verdict of the latest round checked (each judged by that round's node 0).
      if (s.node_check.empty() || round_of(value) > round_of(s.node_check)) s.node_check = value;
    } else if (job_topic_node(key, kStragglerTopic)) {
      // Likewise the latest straggler verdict.
      if (s.straggler.empty() || round_of(value) > round_of(s.straggler)) s.straggler = value;
    }
  }
  return k;
}

// The round's members in node-rank order, with their worker counts where the round records them.
std::pair<std::vector<std::string>, std::vector<int>> round_members(Backend backend,
                                                                    const JobKeys& k,
                                                                    JobStatus& s) {
  std::vector<std::string> members;
  std::vector<int> nproc;
  if (backend == Backend::kStatic) {
    // Node ranks are the ids; every present node is in the round.
    std::vector<std::pair<int, std::string>> ranked;
    for (const auto& [id, record] : k.present) ranked.emplace_back(to_int(id, -1), id);
    std::sort(ranked.begin(), ranked.end());
    for (const auto& [rank, id] : ranked) members.push_back(id);
    s.round = k.counter;
    s.restarts = std::max(0, k.counter);
    if (s.max_restarts) s.restarts = std::min(s.restarts, *s.max_restarts);
  } else if (!k.rounds.empty()) {
    s.round = k.rounds.rbegin()->first;
    s.forming = k.counter > s.round;
    if (auto round = records::parse_round(k.rounds.rbegin()->second)) {
      members = std::move(round->participants);
      nproc = std::move(round->nproc);
    }
  }
  return {std::move(members), std::move(nproc)};
}

}  // namespace

JobStatus interpret_job_keys(Backend backend,
                             const std::vector<std::pair<std::string, std::string>>& keys) {
  JobStatus s;
  s.found = !keys.empty();
  const JobKeys k = sort_keys(keys, s);
  if (!k.failures.empty()) s.last_failures = k.failures.rbegin()->second;
  // The failure that found no restart left counts one past the budget: the budget is spent.
  if (s.max_restarts) s.restarts = std::min(s.restarts, *s.max_restarts);
  const auto [members, nproc] = round_members(backend, k, s);
  int next_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const auto it = k.present.find(members[i]);
    NodeStatus n = node_of(members[i], it == k.present.end() ? "{}" : it->second);
    n.present = it != k.present.end();
    if (i < nproc.size()) n.nproc = nproc[i];
    n.node_rank = static_cast<int>(i);
    n.first_rank = next_rank;
    n.last_rank = next_rank + n.nproc - 1;
    next_rank += n.nproc;
    if (const auto c = k.checkpoints.find(n.id); c != k.checkpoints.end()) {
      n.checkpoints = c->second;
    }
    if (const auto r = k.restarts.find(n.id); r != k.restarts.end()) n.last_restart = r->second;
    s.nodes.push_back(std::move(n));
  }
  s.world_size = next_rank;
  if (const auto it = k.present.find(s.leader); !s.leader.empty() && it != k.present.end()) {
    s.leader_host = node_of(s.leader, it->second).host;
  }
  for (const auto& [id, record] : k.present) {
    if (std::find(members.begin(), members.end(), id) == members.end()) {
      s.spares.push_back(node_of(id, record));
    }
  }
  return s;
}

JobStatus read_job_status(const RendezvousConfig& c) {
  asio::io_context io(1);
  std::shared_ptr<JobStore> store = make_job_store(io, c);
  auto read = [store]() -> asio::awaitable<std::vector<KeyEvent>> {
    std::string everything;
    auto keys = co_await store->read_prefix(everything);
    store->leave();
    co_return keys;
  };
  auto future = asio::co_spawn(io, read(), asio::use_future);
  io.run();
  std::vector<std::pair<std::string, std::string>> keys;
  for (auto& e : future.get()) keys.emplace_back(std::move(e.key), std::move(e.value));
  return interpret_job_keys(c.backend, keys);
}

}  // namespace ddprun::rendezvous
