#include "exchanges/checkpoint_sources.hpp"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace ddprun::agent::checkpoint_sources {
namespace {

using Steps = std::vector<std::vector<int64_t>>;

bool steps_in(const nlohmann::json& j, Steps& out) {
  if (!j.is_array()) return false;
  for (const auto& rank : j) {
    if (!rank.is_array()) return false;
    std::vector<int64_t> steps;
    for (const auto& s : rank) {
      if (!s.is_number_integer()) return false;
      steps.push_back(s.get<int64_t>());
    }
    out.push_back(std::move(steps));
  }
  return true;
}

bool has_any(const Steps& s) {
  return std::any_of(s.begin(), s.end(), [](const auto& r) { return !r.empty(); });
}

}  // namespace

std::string to_text(const NodeCheckpoints& n) {
  return nlohmann::json{
      {"id", n.id}, {"local", n.local}, {"holds", n.holds}, {"host", n.host}, {"port", n.port}}
      .dump();
}

std::optional<NodeCheckpoints> from_text(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string() || !j.contains("local") ||
      !j.contains("holds") || !j["holds"].is_object() ||
      !j.value("host", nlohmann::json()).is_string() ||
      !j.value("port", nlohmann::json()).is_number_integer()) {
    return std::nullopt;
  }
  NodeCheckpoints n;
  n.id = j["id"].get<std::string>();
  if (!steps_in(j["local"], n.local)) return std::nullopt;
  for (const auto& [origin, steps] : j["holds"].items()) {
    if (!steps_in(steps, n.holds[origin])) return std::nullopt;
  }
  n.host = j["host"].get<std::string>();
  n.port = j["port"].get<int>();
  return n;
}

RestorePlan plan_restore(const std::vector<NodeCheckpoints>& nodes) {
  RestorePlan plan;
  plan.fetches.resize(nodes.size());
  plan.adopted.resize(nodes.size());
  std::set<std::string> members;
  for (const auto& n : nodes) members.insert(n.id);
  const auto held_anywhere = [&](const std::string& origin) {
    return std::any_of(nodes.begin(), nodes.end(),
                       [&](const NodeCheckpoints& n) { return n.holds.contains(origin); });
  };
  // Nodes that left, whose copies are still held: each may be taken over by a newcomer.
  std::set<std::string> lost;
  for (const auto& n : nodes) {
    for (const auto& [origin, steps] : n.holds) {
      if (!members.contains(origin) && has_any(steps)) lost.insert(origin);
    }
  }
  // Whose copies each node restores: its own, or (a newcomer) a lost node's.
  std::vector<std::string> origin_of(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    origin_of[i] = nodes[i].id;
    if (has_any(nodes[i].local) || held_anywhere(nodes[i].id)) continue;
    for (auto it = lost.begin(); it != lost.end(); ++it) {
      size_t ranks = 0;
      for (const auto& n : nodes) {
        if (const auto h = n.holds.find(*it); h != n.holds.end()) {
          ranks = std::max(ranks, h->second.size());
        }
      }
      if (ranks < nodes[i].local.size()) continue;  // it had fewer ranks than this node
      origin_of[i] = plan.adopted[i] = *it;
      lost.erase(it);
      break;
    }
  }
  // Per node and local rank: the steps it can restore, and where each is held.
  const auto holder_of = [&](const std::string& origin, size_t local,
                             int64_t step) -> std::optional<size_t> {
    for (size_t j = 0; j < nodes.size(); ++j) {
      const auto h = nodes[j].holds.find(origin);
      if (h == nodes[j].holds.end() || h->second.size() <= local) continue;
      const auto& steps = h->second[local];
      if (std::find(steps.begin(), steps.end(), step) != steps.end()) return j;
    }
    return std::nullopt;
  };
  std::optional<std::set<int64_t>> common;
  int base = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t l = 0; l < nodes[i].local.size(); ++l) {
      std::set<int64_t> can;
      if (plan.adopted[i].empty()) can.insert(nodes[i].local[l].begin(), nodes[i].local[l].end());
      for (const auto& n : nodes) {
        const auto h = n.holds.find(origin_of[i]);
        if (h != n.holds.end() && h->second.size() > l) {
          can.insert(h->second[l].begin(), h->second[l].end());
        }
      }
      if (can.empty()) plan.ranks_without_copy.push_back(base + static_cast<int>(l));
      if (!common) {
        common = std::move(can);
      } else {
        std::set<int64_t> both;
        std::set_intersection(common->begin(), common->end(), can.begin(), can.end(),
                              std::inserter(both, both.end()));
        common = std::move(both);
      }
    }
    base += static_cast<int>(nodes[i].local.size());
  }
  if (!common || common->empty()) return plan;
  plan.ranks_without_copy.clear();
  plan.step = *common->rbegin();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t l = 0; l < nodes[i].local.size(); ++l) {
      const auto& own = nodes[i].local[l];
      if (plan.adopted[i].empty() && std::find(own.begin(), own.end(), *plan.step) != own.end()) {
        continue;
      }
      const std::optional<size_t> holder = holder_of(origin_of[i], l, *plan.step);
      if (!holder) {  // (cannot be: the step is in the rank's set)
        plan.step.reset();
        return plan;
      }
      plan.fetches[i].push_back(
          Fetch{*holder, origin_of[i], static_cast<int>(l), static_cast<int>(l)});
    }
  }
  return plan;
}

boost::asio::awaitable<std::optional<Agreement>> agree(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r, NodeCheckpoints mine,
                                                       std::chrono::milliseconds wait) {
  // (Named arguments for the co_await'ed calls: g++ 12 destroyed a temporary one twice.)
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = "checkpoint_sources";
  std::string text = to_text(mine);
  try {
    co_await rdzv->publish(scope, topic, std::move(text));
  } catch (const std::exception& e) {
    spdlog::warn("could not tell the other nodes which checkpoints this node holds: {}", e.what());
    co_return std::nullopt;
  }
  const std::vector<std::string> texts =
      co_await rdzv->gather(std::move(scope), std::move(topic), r.num_nodes, wait);
  if (static_cast<int>(texts.size()) < r.num_nodes) co_return std::nullopt;
  Agreement a;
  for (const std::string& t : texts) {
    std::optional<NodeCheckpoints> n = from_text(t);
    if (!n) co_return std::nullopt;
    a.nodes.push_back(std::move(*n));
  }
  // In node rank order (the exchange gives them in the order of the nodes' ids).
  if (!r.members.empty()) {
    std::vector<NodeCheckpoints> ordered;
    for (const std::string& id : r.members) {
      const auto it = std::find_if(a.nodes.begin(), a.nodes.end(),
                                   [&](const NodeCheckpoints& n) { return n.id == id; });
      if (it == a.nodes.end()) co_return std::nullopt;  // (not this round's account)
      ordered.push_back(std::move(*it));
    }
    a.nodes = std::move(ordered);
  }
  a.plan = plan_restore(a.nodes);
  co_return a;
}

boost::asio::awaitable<bool> all_fetched(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                         rendezvous::Round r, bool ok,
                                         std::chrono::milliseconds wait) {
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = "checkpoint_restored";
  std::string text = ok ? "ok" : "failed";
  try {
    co_await rdzv->publish(scope, topic, std::move(text));
  } catch (const std::exception& e) {
    spdlog::warn("could not tell the other nodes whether its checkpoints are in place: {}",
                 e.what());
    co_return false;
  }
  const std::vector<std::string> said =
      co_await rdzv->gather(std::move(scope), std::move(topic), r.num_nodes, wait);
  co_return static_cast<int>(said.size()) ==
      r.num_nodes&& std::all_of(said.begin(), said.end(),
                                [](const std::string& s) { return s == "ok"; });
}

}  // namespace ddprun::agent::checkpoint_sources
