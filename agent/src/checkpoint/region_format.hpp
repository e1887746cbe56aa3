#pragma once
// The header of an in-memory checkpoint region as the workers write it (ddprun/checkpoint.py's
// docstring and libddp's checkpoint.cpp give the whole layout), and of a slot persisted to
// --checkpoint_dir: a file of the same layout holding one slot, as slot 0. Private to the agent.
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
};

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

// A header for a file of the region layout holding `record` as slot 0, with slots of
// `slot_size` bytes: kRegionHeader bytes.
std::string region_header_for(const SlotRecord& record, uint64_t slot_size, uint64_t save_micros);

// The wrapping sum of the 8-byte words of `n` bytes at `p` (n a multiple of 8), added to `sum`.
uint64_t add_words(uint64_t sum, const char* p, size_t n);

}  // namespace ddprun::agent
