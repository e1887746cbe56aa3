#pragma once
// What `ddprun status` shows of a node's checkpoints: while the job runs, the agent publishes to
// the job's exchange (topic kCheckpointsTopic, the job's scope), at most every few seconds and only
// when it changed, each of its ranks' newest in-memory step and how long that save took, the bytes
// its regions hold, and the newest step it persisted to --checkpoint_dir and how long that copy
// took. Private to the agent.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "checkpoint/regions.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent {

class CheckpointStatus {
 public:
  // `regions` outlives the status.
  CheckpointStatus(boost::asio::io_context& io, std::shared_ptr<rendezvous::Rendezvous> rdzv,
                   const CheckpointRegions& regions);
  // The round now running: these local ranks, as these global ranks. Starts publishing.
  void watch(std::vector<std::pair<int, int>> local_and_global);
  // Stops publishing (the job ended).
  void stop();
  // The node's checkpoint budget (--checkpoint_memory_limit, or its default).
  void budget(uint64_t bytes) { budget_ = bytes; }
  // A rank's step was persisted, its copy taking `seconds`.
  void persisted(int64_t step, double seconds);
  // The round's restore: {"step", "saved_world_size", "reshard", "ranks": [{"rank", "from"}...]}
  // (round_restore.hpp); null: none.
  void restored(nlohmann::json restore) { restored_ = std::move(restore); }
  // Where this node's copies go and what it holds of other nodes' (see account()).
  // (Asked at each look, so that copies received since show: null where there is nothing to say.)
  void replica(std::function<nlohmann::json()> source) { replica_ = std::move(source); }
  // The account as published (as JSON text): {"bytes": B, "ranks": [{"rank", "local_rank", "step"
  // (null: none), "save_seconds"}...], "persisted": null or {"step", "seconds"}, and with copies
  // to a peer "replica": {"peer": "host:port", "safe_step": S or null, "lag": steps, "stride":
  // steps between the steps copied, "holds":
  // {origin node: [steps of its local rank 0]}}, "memory": what the node's checkpoint folder takes,
  // part by part (CheckpointMemory::to_json) and "limit": the budget, and once a round restored one
  // "restored": what restored() was given}.
  nlohmann::json account() const;

 private:
  void tick();

  boost::asio::io_context& io_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  const CheckpointRegions& regions_;
  boost::asio::steady_timer timer_;
  std::vector<std::pair<int, int>> ranks_;
  std::optional<std::pair<int64_t, double>> persisted_;
  std::optional<uint64_t> budget_;
  std::function<nlohmann::json()> replica_;
  nlohmann::json restored_;
  std::string published_;
  bool stopped_ = false;
};

}  // namespace ddprun::agent
