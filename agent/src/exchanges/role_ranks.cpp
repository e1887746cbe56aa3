#include "exchanges/role_ranks.hpp"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace ddprun::agent::role_ranks {

RolePlace place_of(const std::vector<NodeRole>& nodes, int me) {
  std::string mine;
  for (const NodeRole& n : nodes) {
    if (n.node_rank == me) mine = n.role;
  }
  RolePlace p;
  for (const NodeRole& n : nodes) {
    if (n.role != mine) continue;
    p.world += n.nproc;
    if (n.node_rank < me) p.base += n.nproc;
  }
  return p;
}

boost::asio::awaitable<std::optional<RolePlace>> agree(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r, std::string role,
                                                       int nproc, std::chrono::milliseconds wait) {
  // (Named arguments for the co_await'ed calls: g++ 12 destroyed a temporary one twice.)
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = "roles";
  std::string text =
      nlohmann::json{{"node_rank", r.node_rank}, {"role", role}, {"nproc", nproc}}.dump();
  try {
    co_await rdzv->publish(scope, topic, std::move(text));
  } catch (const std::exception& e) {
    spdlog::warn("could not tell the other nodes this node's role: {}", e.what());
    co_return std::nullopt;
  }
  const std::vector<std::string> texts =
      co_await rdzv->gather(std::move(scope), std::move(topic), r.num_nodes, wait);
  if (static_cast<int>(texts.size()) < r.num_nodes) co_return std::nullopt;
  std::vector<NodeRole> nodes;
  for (const std::string& t : texts) {
    const auto j = nlohmann::json::parse(t, nullptr, false);
    try {
      nodes.push_back(NodeRole{j.at("node_rank").get<int>(), j.at("role").get<std::string>(),
                               j.at("nproc").get<int>()});
    } catch (const nlohmann::json::exception&) {
      co_return std::nullopt;
    }
  }
  co_return place_of(nodes, r.node_rank);
}

}  // namespace ddprun::agent::role_ranks
