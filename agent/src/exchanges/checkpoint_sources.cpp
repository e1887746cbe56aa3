#include "exchanges/checkpoint_sources.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace ddprun::agent::checkpoint_sources {
namespace {

// (rank, world, step) -> the nodes holding that slot, in node rank order.
using Holders = std::map<std::tuple<int, int, int64_t>, std::vector<size_t>>;

// Whether node `n` can give what it holds to another node: it serves copies.
bool serves(const NodeCheckpoints& n) { return n.port != 0; }

// The node that gives node `to` slot (rank, world, step): itself where it holds it, else the
// first that does and serves; nullopt: none.
std::optional<size_t> source_for(const std::vector<NodeCheckpoints>& nodes, const Holders& holders,
                                 size_t to, int rank, int world, int64_t step) {
  const auto it = holders.find({rank, world, step});
  if (it == holders.end()) return std::nullopt;
  const std::vector<size_t>& who = it->second;
  if (std::find(who.begin(), who.end(), to) != who.end()) return to;
  for (size_t h : who) {
    if (serves(nodes[h])) return h;
  }
  return std::nullopt;
}

// Every node's fetches of the slots saved at world size `world` at `step`: each node those of its
// own ranks that the world had (`mine`), or every rank's; nullopt where one cannot be had.
std::optional<std::vector<std::vector<Fetch>>> fetches_for(
    const std::vector<NodeCheckpoints>& nodes, const Holders& holders, int64_t step, int world,
    bool mine) {
  std::vector<std::vector<Fetch>> out(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    const int first = mine ? nodes[n].base_rank : 0;
    const int last = mine ? std::min(world, nodes[n].base_rank + nodes[n].nproc) : world;
    for (int rank = first; rank < last; ++rank) {
      const std::optional<size_t> from = source_for(nodes, holders, n, rank, world, step);
      if (!from) return std::nullopt;
      out[n].push_back(Fetch{*from, rank, world});
    }
  }
  return out;
}

}  // namespace

std::string to_text(const NodeCheckpoints& n) {
  nlohmann::json held = nlohmann::json::array();
  for (const HeldSlot& h : n.held) {
    held.push_back({h.rank, h.world, h.step, h.bytes, h.dcp_metadata ? 1 : 0, h.state});
  }
  return nlohmann::json{{"id", n.id},       {"node_rank", n.node_rank}, {"base_rank", n.base_rank},
                        {"nproc", n.nproc}, {"held", std::move(held)},  {"host", n.host},
                        {"port", n.port},   {"timeline", n.timeline}}
      .dump();
}

std::optional<NodeCheckpoints> from_text(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    NodeCheckpoints n;
    n.id = j.at("id").get<std::string>();
    n.node_rank = j.at("node_rank").get<int>();
    n.base_rank = j.at("base_rank").get<int>();
    n.nproc = j.at("nproc").get<int>();
    for (const auto& h : j.at("held")) {
      if (!h.is_array() || h.size() != 6) return std::nullopt;
      n.held.push_back(HeldSlot{h[0].get<int>(), h[1].get<int>(), h[2].get<int64_t>(),
                                h[3].get<uint64_t>(), h[4].get<int>() != 0, h[5].get<uint64_t>()});
    }
    n.host = j.at("host").get<std::string>();
    n.port = j.at("port").get<int>();
    n.timeline = j.at("timeline").get<int>();
    if (n.timeline < -1 || n.node_rank < 0 || n.base_rank < 0 || n.nproc < 0) return std::nullopt;
    return n;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

RestorePlan plan_restore(const std::vector<NodeCheckpoints>& nodes, int world_size,
                         std::optional<int64_t> before) {
  RestorePlan plan;
  Holders holders;
  std::set<int64_t, std::greater<>> steps;
  std::map<int64_t, std::set<int>> worlds;      // per step, the world sizes it was saved at
  std::set<std::pair<int64_t, int>> resharded;  // (step, world) with a DCP coordinator's slot
  std::map<std::tuple<int, int, int64_t>, uint64_t> state_of;  // each slot's, the first seen
  int newest = -1;
  for (const NodeCheckpoints& n : nodes) newest = std::max(newest, n.timeline);
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].timeline < newest) {
      plan.behind.push_back(n);
      continue;
    }
    for (const HeldSlot& h : nodes[n].held) {
      if (h.rank < 0 || h.world <= 0 || h.rank >= h.world) continue;
      const auto [first, added] = state_of.try_emplace({h.rank, h.world, h.step}, h.state);
      if (!added && first->second != h.state) plan.twice.push_back({h.step, h.rank});
      auto& who = holders[{h.rank, h.world, h.step}];
      if (who.empty() || who.back() != n) who.push_back(n);
      steps.insert(h.step);
      worlds[h.step].insert(h.world);
      if (h.dcp_metadata && h.rank == 0) resharded.insert({h.step, h.world});
    }
  }
  std::sort(plan.twice.begin(), plan.twice.end());
  plan.twice.erase(std::unique(plan.twice.begin(), plan.twice.end(),
                               [](const auto& a, const auto& b) { return a.step == b.step; }),
                   plan.twice.end());
  for (const RestorePlan::SavedTwice& t : plan.twice) steps.erase(t.step);
  for (int64_t step : steps) {
    if (before && step >= *before) continue;
    if (auto same = fetches_for(nodes, holders, step, world_size, true)) {
      plan.step = step;
      plan.saved_world = world_size;
      plan.fetches = std::move(*same);
      return plan;
    }
    for (int world : worlds[step]) {
      if (world == world_size) continue;
      if (resharded.contains({step, world})) {
        if (auto all = fetches_for(nodes, holders, step, world, false)) {
          plan.step = step;
          plan.saved_world = world;
          plan.reshard = true;
          plan.fetches = std::move(*all);
          return plan;
        }
        continue;
      }
      // checkpoint.save's state, one rank's: each rank the saved world had gets its own.
      if (auto own = fetches_for(nodes, holders, step, world, true)) {
        plan.step = step;
        plan.saved_world = world;
        plan.fetches = std::move(*own);
        return plan;
      }
    }
  }
  std::set<int> held_ranks;
  std::map<int, int64_t> newest_of;  // of the steps saved once (the world size's ranks)
  std::map<int64_t, int> ranks_of;   // ... and how many ranks each has
  for (const auto& [key, _] : holders) {
    const auto [rank, world, step] = key;
    if (world != world_size) continue;
    held_ranks.insert(rank);
    if (!steps.contains(step)) continue;  // (saved twice)
    ++ranks_of[step];
    const auto [it, added] = newest_of.try_emplace(rank, step);
    if (!added) it->second = std::max(it->second, step);
  }
  if (!holders.empty()) {
    for (int rank = 0; rank < world_size; ++rank) {
      if (!held_ranks.contains(rank)) plan.ranks_without_copy.push_back(rank);
    }
    // Every rank held, and no step all of them have (not a step no holder could serve).
    const bool common = std::any_of(ranks_of.begin(), ranks_of.end(),
                                    [&](const auto& r) { return r.second == world_size; });
    if (plan.ranks_without_copy.empty() && !common &&
        static_cast<int>(newest_of.size()) == world_size) {
      for (const auto& [rank, step] : newest_of) plan.newest_by_rank.push_back(step);
    }
  }
  plan.fetches.assign(nodes.size(), {});
  return plan;
}

std::vector<size_t> other_holders(const std::vector<NodeCheckpoints>& nodes,
                                  const RestorePlan& plan, size_t to, const Fetch& f) {
  std::vector<size_t> out;
  if (!plan.step) return out;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (n == f.holder || n == to || !serves(nodes[n]) ||
        std::find(plan.behind.begin(), plan.behind.end(), n) != plan.behind.end()) {
      continue;
    }
    const auto& held = nodes[n].held;
    if (std::any_of(held.begin(), held.end(), [&](const HeldSlot& h) {
          return h.rank == f.rank && h.world == f.world && h.step == *plan.step;
        })) {
      out.push_back(n);
    }
  }
  return out;
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
  // In node rank order (the exchange gives them in the order of the nodes' ids); one per rank.
  std::sort(a.nodes.begin(), a.nodes.end(), [](const NodeCheckpoints& x, const NodeCheckpoints& y) {
    return x.node_rank < y.node_rank;
  });
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    if (a.nodes[i].node_rank != static_cast<int>(i)) co_return std::nullopt;  // not this round's
  }
  a.plan = plan_restore(a.nodes, r.world_size);
  co_return a;
}

boost::asio::awaitable<Outcome> same_outcome(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                             rendezvous::Round r, std::optional<int64_t> step,
                                             std::chrono::milliseconds wait) {
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = "checkpoint_outcome";
  const std::string mine = step ? std::to_string(*step) : "none";
  std::string text = mine;
  std::vector<std::string> said;
  try {
    co_await rdzv->publish(scope, topic, std::move(text));
    said = co_await rdzv->gather(scope, topic, r.num_nodes, wait);
  } catch (const std::exception& e) {
    spdlog::warn("could not tell the other nodes which checkpoint step this node restores: {}",
                 e.what());
  }
  const bool all_said = static_cast<int>(said.size()) == r.num_nodes;
  if (all_said &&
      std::all_of(said.begin(), said.end(), [&](const std::string& s) { return s == mine; })) {
    co_return Outcome::kSame;
  }
  if (!all_said && rdzv->round_ended(r)) {  // a node left it: no flag, no restart spent
    spdlog::warn(
        "round {}: it ended before every node said which checkpoint step it restores (of {} "
        "nodes, {} said): no worker starts in it",
        r.number, r.num_nodes, said.size());
    co_return Outcome::kRoundEnded;
  }
  std::string reason = fmt::format(
      "the nodes did not decide on the same checkpoint step to restore (this node: {}; of {} "
      "nodes, {} said: {})",
      mine, r.num_nodes, said.size(), fmt::join(said, ", "));
  spdlog::error("round {}: {}: no worker starts in it, the next round decides again", r.number,
                reason);
  std::string none;
  co_await rdzv->raise(std::move(scope), std::move(topic), std::move(reason), std::move(none));
  co_return Outcome::kNotSame;
}

boost::asio::awaitable<bool> all_did(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                     rendezvous::Round r, std::string topic, bool ok,
                                     std::chrono::milliseconds wait) {
  rendezvous::Scope scope = rendezvous::Scope::of(r);
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
