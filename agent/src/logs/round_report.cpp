#include "logs/round_report.hpp"

#include <optional>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace ddprun::agent {
namespace asio = boost::asio;

namespace {

// A restart's phases published to the job (`ddprun status` reads them); nothing where the store
// is gone or the job ended.
asio::awaitable<void> publish_restart(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                      std::string text) {
  rendezvous::Scope scope = rendezvous::Scope::job();
  std::string topic = rendezvous::kRestartTopic;
  try {
    co_await rdzv->publish(std::move(scope), std::move(topic), std::move(text));
  } catch (const std::exception&) {
  }
}

}  // namespace

RoundReport::RoundReport(Spawn spawn, const AgentConfig& cfg,
                         std::shared_ptr<rendezvous::Rendezvous> rdzv, EventLog& events)
    : spawn_(std::move(spawn)), cfg_(cfg), rdzv_(std::move(rdzv)), events_(events) {}

void RoundReport::formed(const rendezvous::Round& round) {
  clock_.round_formed(std::chrono::steady_clock::now(), round.number, round.restart_count);
  if (round.restart_count > last_restart_count_) {
    spdlog::warn("restarting the workers (restart {} of at most {})", round.restart_count,
                 cfg_.rdzv.max_restarts);
    events_.record("restart", {{"restart_count", round.restart_count},
                               {"max_restarts", cfg_.rdzv.max_restarts}});
    last_restart_count_ = round.restart_count;
  }
  nlohmann::json formed = {{"round", round.number},        {"restart_count", round.restart_count},
                           {"node_rank", round.node_rank}, {"num_nodes", round.num_nodes},
                           {"base_rank", round.base_rank}, {"world_size", round.world_size},
                           {"members", round.members}};
  if (const std::optional<rendezvous::ClockOffset> clock = rdzv_->clock_offset()) {
    // The store's clock minus this node's, for `ddprun timeline` (ms, µs precision).
    formed["clock_offset_ms"] = static_cast<double>(clock->offset_micros) / 1000.0;
    formed["clock_round_trip_ms"] = static_cast<double>(clock->round_trip_micros) / 1000.0;
  }
  events_.record("round_formed", std::move(formed));
  if (round.num_nodes > 1 || cfg_.rdzv.max_nodes > 1) {
    spdlog::info("round {}: node {} of {}, ranks {}-{} of {}", round.number, round.node_rank,
                 round.num_nodes, round.base_rank, round.base_rank + cfg_.rdzv.nproc - 1,
                 round.world_size);
  }
}

void RoundReport::attempt_ended(const AttemptTimes& times, std::string cause) {
  clock_.attempt_ended(times, std::move(cause));
}

void RoundReport::attempt_progressed(const AttemptTimes& times) {
  const std::optional<RestartPhases> p = clock_.complete(times);
  if (!p) return;
  spdlog::info(
      "the restart into round {} took {:.3f} s: {:.3f} s to detect the {}, {:.3f} s to stop the "
      "workers, {:.3f} s to form the round, {:.3f} s to start the workers, {}",
      p->round, p->total(), p->detection, p->cause == "interrupted" ? "interruption" : p->cause,
      p->stopping, p->rendezvous, p->starting,
      p->first_progress ? fmt::format("{:.3f} s to their first progress", *p->first_progress)
                        : std::string("and they made no progress"));
  nlohmann::json phases = p->to_json();
  events_.record("restart_phases", phases);
  std::string text = phases.dump();
  spawn_(publish_restart(rdzv_, std::move(text)));
}

}  // namespace ddprun::agent
