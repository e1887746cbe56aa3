#pragma once
// Copying one committed slot of a worker's region to --checkpoint_dir and back: the I/O of the
// persister (persister.hpp), every byte summed on its way and checked against the slot's
// checksum; what is written goes under a temporary name, synced, and renamed once complete. To
// disk, the slot is staged first in a file beside the regions (".persist.rank<L>", at memory
// speed, where the node's checkpoint budget has room for it), so that the worker's next saves do
// not race a slow disk. Where the job has a token, a
// file also carries its MAC (slot_mac.hpp, at kSlot0MacAt of its header), and a file read back
// must carry this token's: --checkpoint_dir's files are only as trusted as whoever can write there.
// Private to the agent.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "checkpoint/region_format.hpp"
#include "ddprun/store/auth.hpp"

namespace ddprun::agent {

// One rank's copy, done or not.
struct PersistReport {
  enum class Kind { kPersisted, kDropped, kFailed, kRestored };
  Kind kind = Kind::kPersisted;
  int local_rank = 0;
  int rank = 0;
  int64_t step = 0;
  uint64_t bytes = 0;
  std::chrono::duration<double> took{0};
  std::string detail;  // kDropped, kFailed: why; kPersisted, kRestored: the file
};

// A torch.distributed.checkpoint save's job metadata, the last metadata_size bytes (rounded up to
// 8) of the payload of `rec`, slot 0 of the file open as `fd` (`name`), written to
// `folder`/.metadata (synced, renamed into place). Throws std::system_error.
void write_dcp_metadata(int fd, const std::filesystem::path& name, const SlotRecord& rec,
                        const std::filesystem::path& folder);

// The header of a region or persisted file; nullopt where there is none or it is not one.
std::optional<RegionHeader> read_region_header(const std::filesystem::path& file);

// Each worker's region in the node's checkpoint folder `regions` (rank<L>; not a grown one's
// rank<L>.new) with its header, in no order; a file that is not a region is skipped.
void for_each_region(
    const std::filesystem::path& regions,
    const std::function<void(const std::filesystem::path&, const RegionHeader&)>& visit);

// Copies step `step` of local rank `local_rank`'s region in `regions` to
// `dir`/step_<step>/rank_<rank>.ddpckpt (and, for a torch.distributed.checkpoint save's
// coordinator, `dir`/step_<step>/.metadata). kDropped when the slot was reused before or during the
// copy, or `stop` was set (detail empty: the file was already there); kPersisted. With `token`,
// the file carries its MAC under it. Throws std::system_error (a write failed, the disk is full).
PersistReport copy_to_disk(const std::filesystem::path& regions, int local_rank, int64_t step,
                           const std::filesystem::path& dir, int rank,
                           const std::atomic<bool>& stop,
                           const std::optional<store::Token>& token = std::nullopt,
                           std::optional<uint64_t> limit = std::nullopt);

// Copies `dir`/step_<step>/rank_<rank>.ddpckpt back into local rank `local_rank`'s region in
// `regions` (made anew, reserved and checked): kRestored. Throws std::system_error when it cannot
// (no such file, not a checkpoint of that step, one global rank `rank` did not save, a checksum
// that does not match, /dev/shm full; with `token`, a file without its MAC under that token).
PersistReport read_back(const std::filesystem::path& dir, int64_t step, int rank,
                        const std::filesystem::path& regions, int local_rank,
                        const std::atomic<bool>& stop,
                        const std::optional<store::Token>& token = std::nullopt);

// Makes `dir`/step_<step>/rank_<rank>.ddpckpt local rank `local_rank`'s region in `regions`
// without copying its payload: its second slot reserved, a region's header written over its own,
// renamed into place (replacing the region there). Only for a file this agent wrote and checked
// against its checksum itself (a copy fetched, or made on this node, for a round's restore):
// nothing is read back. False where the file cannot be moved (another name links to its bytes,
// which the region's next save would change; it is not global rank `rank`'s step `step` of the
// current layout): the caller copies it instead (read_back). Throws std::system_error (no such
// file, no room for the second slot).
bool move_back(const std::filesystem::path& dir, int64_t step, int rank,
               const std::filesystem::path& regions, int local_rank);

}  // namespace ddprun::agent
