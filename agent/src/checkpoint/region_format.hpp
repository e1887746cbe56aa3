#pragma once
// The header of an in-memory checkpoint region as the workers write it (docs/region_format.md gives
// the whole layout), and of a slot persisted to --checkpoint_dir or copied between agents: a file
// of the same layout holding one slot, as slot 0. A checkpoint is the state of one global rank at
// one step: each slot records the rank and world size that saved it. Files of the first layout
// (magic DDPCKPT1, before slots recorded their rank) are read with the rank unknown (-1): only
// --checkpoint_dir's, whose path names the rank, are restored from. Private to the agent.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::agent {

inline constexpr size_t kRegionHeader = 4096;     // slot i's payload at 4096 + i * slot size
inline constexpr size_t kRegionHeaderRead = 272;  // the bytes of the header that say anything

struct SlotRecord {
  enum State : uint64_t { kEmpty = 0, kWriting = 1, kCommitted = 2 };
  uint64_t state = kEmpty;
  int64_t step = 0;
  uint64_t size = 0;      // the payload's bytes
  uint64_t checksum = 0;  // the wrapping sum of the payload's 8-byte words
  uint64_t sequence = 0;  // newer commits higher
  uint64_t structure_size = 0;
  uint64_t metadata_size = 0;  // a torch.distributed.checkpoint save's job metadata, at the end
  uint64_t world_size = 0;     // WORLD_SIZE at the save
  int64_t rank = -1;           // the global rank that saved it (-1: unknown, the first layout)
  uint64_t run_tag = 0;        // its run's tag (run_tag_of)
};

// A run's tag: the 64-bit FNV-1a hash of its run id, as the workers record it.
uint64_t run_tag_of(std::string_view run_id);

struct RegionHeader {
  uint64_t slot_size = 0;
  SlotRecord slots[2];
  uint64_t save_micros[2] = {0, 0};  // how long each slot's save took

  // The newest committed slot; -1: none.
  int newest_committed() const;
  // The committed slot holding `step`; -1: none.
  int slot_of(int64_t step) const;
  // The steps committed, oldest first (none, one or two).
  std::vector<int64_t> committed_steps() const;
};

// The header in `bytes` (its first kRegionHeaderRead bytes or more); nullopt: not a region.
std::optional<RegionHeader> parse_region_header(std::string_view bytes);

// A header for a file of the region layout (the current one) holding `record` as slot 0, with
// slots of `slot_size` bytes: kRegionHeader bytes.
std::string region_header_for(const SlotRecord& record, uint64_t slot_size, uint64_t save_micros);

// The wrapping sum of the 8-byte words of `n` bytes at `p` (n a multiple of 8), added to `sum`.
uint64_t add_words(uint64_t sum, const char* p, size_t n);

}  // namespace ddprun::agent
