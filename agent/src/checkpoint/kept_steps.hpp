#pragma once
// A node's own copies of its ranks' steps, in its checkpoint folder's kept/ (kept/step_<S>/
// rank_<L>.ddpckpt, of the persisted layout with the payload's digest): each staged out of a
// worker's region at memory speed before the worker's saves reuse the slot, so that the step
// outlives them; the peer holding the same bytes links to it, and a restore reads it. Dropped
// copies leave their pages for the next stage (spare_pages.hpp). Private to the agent.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::agent {

// One rank's slot to copy: local rank `local_rank` of this node, global rank `rank`.
struct RankSlot {
  int local_rank = 0;
  int rank = 0;
};

// How one rank's stage ended.
struct RankStage {
  uint64_t bytes = 0;      // payload bytes copied
  bool overtaken = false;  // the worker reused the slot before the copy was complete
  std::string error;       // empty: staged
};

// The stages a round's end abandons, all at once: a stage begins in the current epoch and checks
// it before each chunk it copies; its copy is committed under the lock abandon() takes, so that
// once abandon() returns no stage begun before it commits one (a step of the timeline the next
// round leaves must not appear among the kept copies after the restore dropped those beyond its
// step). Any thread.
class StageEpochs {
 public:
  uint64_t current() const { return epoch_; }
  bool abandoned(uint64_t began) const { return epoch_ != began; }
  void abandon();
  // Runs `commit` under the lock unless the stage begun in `began` was abandoned; false if it was.
  template <class Commit>
  bool commit_unless_abandoned(uint64_t began, Commit&& commit) {
    std::lock_guard lock(committing_);
    if (abandoned(began)) return false;
    commit();
    return true;
  }

 private:
  std::atomic<uint64_t> epoch_{0};
  std::mutex committing_;
};

// `slot`'s committed slot of `step` in its region in `regions` copied into `kept_step` (over a
// spare's pages where there is one), checked against its CRC, its digest recorded; within the
// node's budget `limit`; nothing kept where the stage begun in epoch `began` of `epochs` is
// abandoned meanwhile (`error` says so): a spare's pages it was writing over go back to the spares
// (held up to `spares_most` bytes, spare_pages.hpp), not to the kernel, which would take the time
// the workers' exit and the restore need. Never throws.
RankStage stage_rank(const std::filesystem::path& regions, const RankSlot& slot, int64_t step,
                     const std::filesystem::path& kept_step, std::optional<uint64_t> limit,
                     StageEpochs& epochs, uint64_t began, uint64_t spares_most);

// The steps of local rank `local_rank` kept in `keep`.
std::vector<int64_t> kept_steps(const std::filesystem::path& keep, int local_rank);
// Removes local rank `local_rank`'s kept copies in `keep` but those of the steps `except` (and
// step folders left empty), their pages held for the next stage up to `spares` bytes in all
// (spare_pages.hpp; 0: none, the memory is wanted).
void drop_kept(const std::filesystem::path& keep, int local_rank,
               const std::vector<int64_t>& except, uint64_t spares);

}  // namespace ddprun::agent
