#pragma once
// The header of an in-memory checkpoint region as the workers write it (docs/region_format.md gives
// the whole layout), and of a slot persisted to --checkpoint_dir or copied between agents: a file
// of the same layout holding one slot, as slot 0. A checkpoint is the state of one global rank at
// one step: each slot records the rank and world size that saved it. Files of the first layout
// (magic DDPCKPT1, before slots recorded their rank) are read with the rank unknown (-1): only
// --checkpoint_dir's, whose path names the rank, are restored from. A slot's payload is checked
// by its CRC-32; files of the layouts before (DDPCKPT1, DDPCKPT2) by the wrapping sum of their
// 8-byte words, checked as they are read and rewritten with their CRC. Private to the agent.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::agent {

inline constexpr size_t kRegionHeader = 4096;     // slot i's payload at 4096 + i * slot size
inline constexpr size_t kRegionHeaderRead = 344;  // the bytes of the header that say anything

// Where slot i's record starts in a region's header (its state, the record's first 8 bytes).
inline constexpr size_t slot_record_at(size_t i) { return 64 + 64 * i; }

// The slot size of a file of the region layout holding a payload of `payload_bytes`: the payload's
// size rounded up to 1 MiB.
inline constexpr uint64_t file_slot_size(uint64_t payload_bytes) {
  constexpr uint64_t kRounding = 1 << 20;
  return (payload_bytes + kRounding - 1) / kRounding * kRounding;
}

// How a slot's checksum sums its payload: CRC-32 (zlib's and Python's zlib.crc32, computed by
// libdeflate; the current layout), or the wrapping sum of its 8-byte words (the layouts before,
// whose files are still read).
enum class PayloadSumKind { kCrc32, kWordSum };

struct SlotRecord {
  enum State : uint64_t { kEmpty = 0, kWriting = 1, kCommitted = 2 };
  uint64_t state = kEmpty;
  int64_t step = 0;
  uint64_t size = 0;      // the payload's bytes
  uint64_t checksum = 0;  // the payload's, of the kind below
  uint64_t sequence = 0;  // newer commits higher
  uint64_t structure_size = 0;
  uint64_t metadata_size = 0;  // a torch.distributed.checkpoint save's job metadata, at the end
  uint64_t world_size = 0;     // WORLD_SIZE at the save
  int64_t rank = -1;           // the global rank that saved it (-1: unknown, the first layout)
  uint64_t run_tag = 0;        // its run's tag (run_tag_of)
  PayloadSumKind sum_kind = PayloadSumKind::kCrc32;
  // The saved state's digest (bit 32 set; 0: the writer recorded none): the CRC-32 of the payload
  // with the save's own bookkeeping left out of its structure (a replicated= holder's ordinal, a
  // DCP save's count), so that two saves of one state have one digest and two states two
  // (docs/region_format.md).
  uint64_t state_digest = 0;

  // What identifies the state this slot holds: its digest, or its checksum where it has none.
  uint64_t state_identity() const { return state_digest != 0 ? state_digest : checksum; }
};

// Where slot 0's checksum lies in a file of the region layout; and, in a file of --checkpoint_dir
// written by a job with a token, its MAC (32 bytes, slot_mac.hpp; zeros: none).
inline constexpr size_t kSlot0ChecksumAt = 64 + 24;
inline constexpr size_t kSlot0MacAt = 272;

// A run's tag: the 64-bit FNV-1a hash of its run id, as the workers record it.
uint64_t run_tag_of(std::string_view run_id);

struct RegionHeader {
  uint64_t slot_size = 0;
  SlotRecord slots[2];
  uint64_t save_micros[2] = {0, 0};  // how long each slot's save took

  // The newest committed slot; -1: none.
  int newest_committed() const;
  // The committed slot holding `step` (the newer save, where a step was saved twice); -1: none.
  int slot_of(int64_t step) const;
  // The steps committed, oldest first (none, one or two).
  std::vector<int64_t> committed_steps() const;
};

// The header in `bytes` (its first kRegionHeaderRead bytes or more); nullopt: not a region.
std::optional<RegionHeader> parse_region_header(std::string_view bytes);

// A header for a file of the region layout (the current one) holding `record` as slot 0, with
// slots of `slot_size` bytes: kRegionHeader bytes. Its checksum is `record`'s, whatever its kind:
// a record of a layout before is rewritten with its CRC (SlotFileWriter::commit).
std::string region_header_for(const SlotRecord& record, uint64_t slot_size, uint64_t save_micros);

// A payload's checksum of one kind, summed from its bytes in order, in pieces of any size (the
// word sum's pieces whole 8-byte words).
class PayloadSum {
 public:
  explicit PayloadSum(PayloadSumKind kind = PayloadSumKind::kCrc32) : kind_(kind) {}
  void add(const char* p, size_t n);
  uint64_t value() const { return value_; }

 private:
  PayloadSumKind kind_;
  uint64_t value_ = 0;
};

// The CRC-32 of `bytes` (a whole payload: a slot's checksum).
uint64_t payload_crc(std::string_view bytes);

}  // namespace ddprun::agent
