#include "checkpoint/replicator.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <boost/asio/co_spawn.hpp>

#include "checkpoint/slot_copy.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;

namespace {
constexpr std::chrono::milliseconds kPoll{20};
}  // namespace

CheckpointReplicator::CheckpointReplicator(asio::io_context& io, PeerService& service,
                                           std::filesystem::path regions, Report report)
    : io_(io),
      service_(service),
      regions_(std::move(regions)),
      report_(std::move(report)),
      timer_(io) {}

CheckpointReplicator::~CheckpointReplicator() {
  *alive_ = false;
  timer_.cancel();
}

std::string CheckpointReplicator::peer() const {
  return peer_ ? fmt::format("{}:{}", peer_->host, peer_->port) : std::string();
}

void CheckpointReplicator::watch(std::string origin, std::vector<RankSlot> ranks,
                                 std::optional<PeerAddress> peer) {
  const bool same_peer = peer && peer_ && peer->host == peer_->host && peer->port == peer_->port;
  origin_ = std::move(origin);
  ranks_ = std::move(ranks);
  peer_ = std::move(peer);
  ++generation_;
  busy_ = false;  // a copy to the previous peer still under way reports into the void
  if (!same_peer) {
    safe_.reset();
    sent_.reset();
  }
  timer_.cancel();
  if (!peer_ || ranks_.empty()) return;
  poll();
}

void CheckpointReplicator::poll() {
  timer_.expires_after(kPoll);
  timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec || !*alive) return;
    poll();
  });
  std::optional<int64_t> newest;
  for (const RankSlot& r : ranks_) {
    const auto h = read_region_header(regions_ / fmt::format("rank{}", r.local_rank));
    const std::vector<int64_t> steps = h ? h->committed_steps() : std::vector<int64_t>{};
    if (steps.empty()) return;  // a rank without a checkpoint: nothing every rank holds
    const int64_t mine = *std::max_element(steps.begin(), steps.end());
    newest = newest ? std::min(*newest, mine) : mine;
  }
  newest_ = newest;
  if (busy_ || !newest || (sent_ && *newest <= *sent_)) return;
  busy_ = true;
  sent_ = newest;
  const uint64_t generation = generation_;
  asio::co_spawn(
      io_, service_.put(*peer_, origin_, regions_, ranks_, *newest, regions_ / "kept"),
      [this, alive = alive_, generation, peer = peer()](std::exception_ptr e, TransferReport r) {
        if (!*alive || generation != generation_) return;
        busy_ = false;
        if (e) return;
        // (A failed step is not tried again: the next new one is.)
        if (r.ok) safe_ = std::max(safe_.value_or(r.step), r.step);
        report_(r, peer);
      });
}

}  // namespace ddprun::agent
