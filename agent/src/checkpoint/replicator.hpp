#pragma once
// A node's checkpoints copied to its peer while the workers run: the agent polls its regions'
// headers and, whenever every local rank has committed a step newer than the one last copied and
// no copy is under way, puts that step to the round's peer node (node k's is node k+1 mod n)
// through the peer service, in the background: a worker never waits for it. A copy that falls
// behind skips to the newest step when it is done, so the step last copied (the node's safe step)
// lags; a copy that fails is tried again at the next new step. Each step copied is also kept on
// this node ("kept" in the regions' folder, PeerService::put), so that the safe step stays
// restorable here after the worker's saves have overwritten both its slots. Private to the agent.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "checkpoint/peer_service.hpp"

namespace ddprun::agent {

class CheckpointReplicator {
 public:
  // Each copy's outcome, on `io`'s thread, never after the replicator is gone.
  using Report = std::function<void(const TransferReport&, const std::string& peer)>;

  // `service` outlives the replicator.
  CheckpointReplicator(boost::asio::io_context& io, PeerService& service,
                       std::filesystem::path regions, Report report);
  ~CheckpointReplicator();
  CheckpointReplicator(const CheckpointReplicator&) = delete;
  CheckpointReplicator& operator=(const CheckpointReplicator&) = delete;

  // The round now running: this node is `origin`, with `ranks`; its peer is `peer` (none: the
  // round has one node). A new peer gets the newest step at once, whatever the last one got.
  void watch(std::string origin, std::vector<RankSlot> ranks, std::optional<PeerAddress> peer);
  // The step every local rank's copy is on the peer of (none yet this round).
  std::optional<int64_t> safe_step() const { return safe_; }
  // The newest step every local rank holds locally (none: no checkpoint yet).
  std::optional<int64_t> newest_local() const { return newest_; }
  // Where copies go: "host:port", or "" with no peer.
  std::string peer() const;

 private:
  void poll();

  boost::asio::io_context& io_;
  PeerService& service_;
  std::filesystem::path regions_;
  Report report_;
  boost::asio::steady_timer timer_;
  std::string origin_;
  std::vector<RankSlot> ranks_;
  std::optional<PeerAddress> peer_;
  std::optional<int64_t> safe_, newest_, sent_;
  uint64_t generation_ = 0;  // each watch(): a copy's report for an earlier peer is ignored
  bool busy_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ddprun::agent
