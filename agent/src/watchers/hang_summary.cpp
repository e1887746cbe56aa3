#include "watchers/hang_summary.hpp"

#include <cstdlib>
#include <map>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "exchanges/hang_exchange.hpp"
#include "watchers/worker_stacks.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;

asio::awaitable<void> summarise_hang(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                     const rendezvous::Round& round,
                                     std::chrono::milliseconds shutdown_timeout, GroupResult& r) {
  std::map<int, std::string> frames = r.frames;
  std::map<int, int> node_of_rank;
  for (const auto& [rank, frame] : r.frames) node_of_rank[rank] = round.node_rank;
  if (round.num_nodes > 1) {
    // Each node collects its stacks within its stack-dump limit and its shutdown timeout.
    const auto wait = shutdown_timeout + std::chrono::seconds(5);
    // Each node's text starts with its node rank, on a line that is no frame's.
    std::string mine = fmt::format("node\t{}\n{}", round.node_rank, frames_to_text(r.frames));
    for (const std::string& text : co_await hang_exchange::frames(rdzv, round, mine, wait)) {
      int node = -1;
      if (text.starts_with("node\t")) node = std::atoi(text.c_str() + 5);
      for (auto& [rank, frame] : frames_from_text(text)) {
        if (node >= 0) node_of_rank.emplace(rank, node);
        frames.emplace(rank, std::move(frame));
      }
    }
  }
  if (frames.empty()) co_return;
  const std::string culprit = hang_culprit(frames, node_of_rank);
  const std::string grouped = ranks_by_frame(frames);
  if (!culprit.empty()) spdlog::error("hang: {}", culprit);
  spdlog::error("hang: every rank's innermost frame: {}", grouped);
  for (auto& f : r.failures) {
    if (f.ended_because.empty()) continue;
    f.ended_because = (culprit.empty() ? "" : "hang: " + culprit + "\n") + f.ended_because +
                      "\nevery rank's innermost frame: " + grouped;
  }
}

}  // namespace ddprun::agent
