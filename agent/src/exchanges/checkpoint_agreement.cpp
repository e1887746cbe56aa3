#include "exchanges/checkpoint_agreement.hpp"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace ddprun::agent::checkpoint_agreement {
std::optional<int64_t> newest_common(const std::vector<std::string>& nodes, int num_nodes) {
  if (static_cast<int>(nodes.size()) < num_nodes) return std::nullopt;
  std::optional<std::set<int64_t>> common;
  for (const std::string& text : nodes) {
    const auto ranks = nlohmann::json::parse(text, nullptr, false);
    if (!ranks.is_array() || ranks.empty()) return std::nullopt;
    for (const auto& steps : ranks) {
      if (!steps.is_array()) return std::nullopt;
      std::set<int64_t> own;
      for (const auto& s : steps) {
        if (s.is_number_integer()) own.insert(s.get<int64_t>());
      }
      if (!common) {
        common = std::move(own);
      } else {
        std::set<int64_t> both;
        std::set_intersection(common->begin(), common->end(), own.begin(), own.end(),
                              std::inserter(both, both.end()));
        common = std::move(both);
      }
    }
  }
  if (!common || common->empty()) return std::nullopt;
  return *common->rbegin();
}

boost::asio::awaitable<std::optional<int64_t>> agree(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                     rendezvous::Round r,
                                                     std::vector<std::vector<int64_t>> held,
                                                     std::chrono::milliseconds wait) {
  // (Named arguments for the co_await'ed calls: g++ 12 destroyed a temporary one twice.)
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = "checkpoint_steps_on_disk";
  std::string text = nlohmann::json(held).dump();
  try {
    co_await rdzv->publish(scope, topic, std::move(text));
  } catch (const std::exception& e) {
    spdlog::warn("could not tell the other nodes which checkpoints this node has on disk: {}",
                 e.what());
    co_return std::nullopt;
  }
  const std::vector<std::string> nodes =
      co_await rdzv->gather(std::move(scope), std::move(topic), r.num_nodes, wait);
  co_return newest_common(nodes, r.num_nodes);
}

}  // namespace ddprun::agent::checkpoint_agreement
