#pragma once
// libddp's replicated buffers held once per node (save(step, buffers, replicated)): a C++ payload's
// structure, and how a local rank other than 0 (a referrer) finds local rank 0's (the holder's)
// slot of the same save, at the save and at the load, as ddprun.checkpoint's replicated= does
// (docs/operations.md). A payload: "DDPCXX1\0" (plain) or "DDPCXX2\0" (with replicated buffers),
// the number of buffers, their sizes (u64); then, for DDPCXX2, the role (1 holder, 2 referrer),
// the number of leading buffers replicated, the save's ordinal (the restart count times 2^32 plus
// its place among the process's saves with replicated buffers), the holder's global rank, and each
// replicated buffer's tile CRC (u64 each); padded to 64. Then each stored buffer's tile (its bytes
// and zeros to a 64-byte boundary): every buffer in a holder's or a plain payload, those after the
// replicated ones in a referrer's. Private to libddp.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "checkpoint_region.hpp"

namespace ddp::checkpoint {

struct Layout {
  enum class Role : uint64_t { kPlain = 0, kHolder = 1, kReferrer = 2 };
  std::vector<uint64_t> sizes;
  Role role = Role::kPlain;
  uint64_t replicated = 0;  // the leading buffers held once per node
  uint64_t ordinal = 0;
  int64_t holder = -1;
  std::vector<uint64_t> crcs;  // the replicated buffers' tile CRCs

  size_t structure_size() const;
  // The index of the first buffer this payload stores.
  size_t first_stored() const { return role == Role::kReferrer ? replicated : 0; }
  // The payload's bytes: the structure and the stored buffers' tiles.
  size_t payload_size() const;
  // Writes the structure (zero-padded) at `out`.
  void write(std::byte* out) const;
  // The structure at the start of a payload of `size` bytes; nullopt where it is not one.
  static std::optional<Layout> read(const std::byte* in, size_t size);
};

// The holder's slot of this referrer's save (step, run, world size and ordinal, from global rank
// `holder`'s region in `folder`), waited for: its layout, or why there is none to refer to (the
// holder saved without replicated buffers, did not begin within 30 s or commit within 600 s, or
// saved again since).
std::variant<Layout, std::string> wait_for_holder(const std::string& folder, int64_t step,
                                                  uint64_t run, uint64_t world, int64_t holder,
                                                  uint64_t ordinal);

// The holder's slot a referrer's layout `ref` names (step, run and world size its own slot's),
// found among the node's regions in `folder`, every replicated tile's CRC checked.
class HolderSlot {
 public:
  // Throws ddp::CheckpointError where the node holds no such slot intact.
  HolderSlot(const std::string& folder, int64_t step, uint64_t run, uint64_t world,
             const Layout& ref);
  // Replicated buffer `i`'s bytes.
  const std::byte* buffer(size_t i) const { return tiles_ + offsets_[i]; }
  // Whether the slot is still the one checked (read after copying out of it).
  bool still_there() const;

 private:
  std::unique_ptr<Region> region_;
  int slot_ = -1;
  Record seen_{};
  const std::byte* tiles_ = nullptr;
  std::vector<size_t> offsets_;
};

}  // namespace ddp::checkpoint
