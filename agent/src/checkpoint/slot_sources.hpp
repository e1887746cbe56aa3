#pragma once
// Every checkpoint slot one node can give, by whose state it is: the global rank, the world size
// and the step its record names (region_format.hpp). Its sources are the node's regions (each
// local rank's, whichever rank it was saved as), the copies of its own steps it keeps
// (kept/step_<S>/rank_<L>.ddpckpt, checkpoint/replicator.hpp) and the copies it holds for other
// nodes (PeerCopies). A slot of another run, or of the first layout (no rank recorded), is none of
// them. Read while no worker runs on any node of the job (a round's restore), so that what it
// lists stays where it is until the restore is done. Private to the agent.
#include <atomic>
#include <compare>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "checkpoint/peer_copies.hpp"
#include "checkpoint/region_format.hpp"

namespace ddprun::agent {

// One slot a node holds: global rank `rank`'s state at `step` in a job of `world` ranks.
struct HeldSlot {
  int rank = 0;
  int world = 0;
  int64_t step = 0;
  uint64_t bytes = 0;  // its payload
  // It holds a torch.distributed.checkpoint save's job metadata (the coordinator's slot): the step
  // can be resharded.
  bool dcp_metadata = false;
  // What identifies its state (SlotRecord::state_identity): two saves of one step with different
  // states (a step saved again, the state changed between) are two entries; two of one state, one.
  uint64_t state = 0;

  auto operator<=>(const HeldSlot&) const = default;
};

class SlotSources {
 public:
  // `copies` may be null (a node that holds none); it must outlive this.
  SlotSources(std::filesystem::path regions, std::filesystem::path kept, PeerCopies* copies,
              uint64_t run_tag);

  // One entry per (rank, world, step, state) held, sorted: a step a rank saved twice, its state
  // changed between, is two (its region may hold both saves, or one while a kept or held copy is
  // of the other).
  std::vector<HeldSlot> held() const;

  // Where a slot is: in `file` (a region or a file of the persisted layout), its payload at
  // `payload_at`.
  struct Found {
    std::filesystem::path file;
    uint64_t payload_at = 0;
    SlotRecord record;
    uint64_t save_micros = 0;
  };
  std::optional<Found> find(int rank, int world, int64_t step) const;

  // Copies that slot into `folder`/step_<step>/rank_<rank>.ddpckpt (the persisted layout; a DCP
  // coordinator's slot also gives the folder its .metadata), checked against its checksum. False
  // where this node does not hold it; throws std::system_error where it cannot be written.
  bool copy_to(int rank, int world, int64_t step, const std::filesystem::path& folder) const;

  // Forgets every slot of a step after `step` (none: every slot): region slots are marked empty,
  // kept and held copies removed. Round `round` restores `step`: what is newer belongs to a
  // timeline the job abandoned, and the workers will save those step numbers again; copies sent in
  // earlier rounds are not held from now on (PeerCopies::current).
  void drop_after(std::optional<int64_t> step, int round) const;
  // The round of the last drop_after() here: this node's slots are of the timeline that round's
  // restore began (-1: none yet). A node that missed a later round's restore (it was out of the
  // job then) holds slots of a timeline the job abandoned.
  int timeline() const { return timeline_; }

 private:
  std::filesystem::path regions_, kept_;
  PeerCopies* copies_;
  uint64_t run_tag_;
  mutable std::atomic<int> timeline_{-1};
};

// The header of a file of the persisted layout holding `found`'s slot as slot 0.
std::string file_header_for(const SlotSources::Found& found);

}  // namespace ddprun::agent
