#include "ddp/checkpoint.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "checkpoint_region.hpp"
#include "checkpoint_replica.hpp"
#include "ddp/errors.hpp"

namespace ddp::checkpoint {
namespace {

uint64_t g_ordinal = 0;  // this process's saves with replicated buffers so far

// The layout of a save of `buffers` whose first `replicated` are the same on every rank: local rank
// 0 holds them for the node; another local rank refers to its slot of the same save once every
// replicated buffer's CRC matches (a mismatch throws), or holds them itself, saying why once.
Layout layout_of(const std::string& folder, int64_t step,
                 const std::vector<std::span<const std::byte>>& buffers, size_t replicated) {
  Layout layout;
  for (const auto& b : buffers) layout.sizes.push_back(b.size());
  if (replicated > buffers.size()) {
    throw CheckpointError(
        fmt::format("checkpoint: {} buffers named replicated, of {}", replicated, buffers.size()));
  }
  const int64_t local = region_slot();
  if (replicated == 0 || region_slots() < 2) return layout;
  layout.replicated = replicated;
  // (with the restart count: a save of an earlier attempt is never this one)
  layout.ordinal =
      (static_cast<uint64_t>(env_int("TORCHELASTIC_RESTART_COUNT", 0)) << 32) + ++g_ordinal;
  layout.holder = env_int("RANK", 0) - local;
  if (local == 0) {
    layout.role = Layout::Role::kHolder;
    return layout;  // (the CRCs follow as its tiles are written)
  }
  for (size_t i = 0; i < replicated; ++i) {
    layout.crcs.push_back(tile_crc(buffers[i].data(), buffers[i].size()));
  }
  const auto holder = wait_for_holder(folder, step, run_tag(env_or("TORCHELASTIC_RUN_ID", "")),
                                      static_cast<uint64_t>(env_int("WORLD_SIZE", 1)),
                                      layout.holder, layout.ordinal);
  if (const auto* why = std::get_if<std::string>(&holder)) {
    static bool warned = false;
    if (!std::exchange(warned, true)) {
      std::fprintf(stderr,
                   "ddp::checkpoint::save: %s: this rank holds its replicated buffers itself "
                   "(once per rank, not once per node; said once)\n",
                   why->c_str());
    }
    Layout own;
    own.sizes = std::move(layout.sizes);
    return own;
  }
  const Layout& theirs = std::get<Layout>(holder);
  if (theirs.replicated != replicated ||
      !std::equal(layout.sizes.begin(), layout.sizes.begin() + replicated, theirs.sizes.begin())) {
    throw CheckpointError(fmt::format(
        "checkpoint: step {}: this rank's {} replicated buffers are not local rank 0's (global "
        "rank {}: {} replicated buffers, or a size differs)",
        step, replicated, layout.holder, theirs.replicated));
  }
  for (size_t i = 0; i < replicated; ++i) {
    if (layout.crcs[i] != theirs.crcs[i]) {
      throw CheckpointError(fmt::format(
          "checkpoint: step {}: replicated buffer {} ({} bytes) differs from local rank 0's "
          "(global rank {}): CRC {:08x} against {:08x}. The buffers named replicated must be the "
          "same on every rank; save what differs after them",
          step, i, layout.sizes[i], layout.holder, layout.crcs[i], theirs.crcs[i]));
    }
  }
  layout.role = Layout::Role::kReferrer;
  return layout;
}

}  // namespace

bool save(int64_t step, const std::vector<std::span<const std::byte>>& buffers, size_t replicated) {
  const std::string folder = env_or("DDPRUN_CHECKPOINT_DIR", "");
  if (folder.empty()) {
    static bool warned = false;
    if (!std::exchange(warned, true)) {
      std::fprintf(stderr, "ddp::checkpoint::save: not started by ddprun: nothing is saved\n");
    }
    return false;
  }
  const auto started = std::chrono::steady_clock::now();
  Layout layout = layout_of(folder, step, buffers, replicated);
  if (layout.role == Layout::Role::kHolder) layout.crcs.assign(replicated, 0);  // (room for them)
  const size_t structure = layout.structure_size();
  const size_t payload = layout.payload_size();
  auto [region, grown] = region_for(folder, payload);
  const Record* r0 = region->record(0);
  const Record* r1 = region->record(1);
  const bool c0 = r0->state == kCommitted, c1 = r1->state == kCommitted;
  // The slot not holding the newest complete checkpoint.
  const int newest = c0 && (!c1 || r0->sequence > r1->sequence) ? 0 : 1;
  const int slot = (newest == 0 ? c0 : c1) ? 1 - newest : 0;
  const uint64_t sequence = std::max(r0->sequence, r1->sequence) + 1;
  Record* rec = region->record(slot);
  rec->state = kWriting;
  std::atomic_thread_fence(std::memory_order_release);
  const int64_t rank = env_int("RANK", 0);
  const uint64_t tag = run_tag(env_or("TORCHELASTIC_RUN_ID", ""));
  std::memcpy(region->map + kRankAt + 8 * slot, &rank, 8);
  std::memcpy(region->map + kRunAt + 8 * slot, &tag, 8);
  std::byte* out = region->payload(slot);
  // The tiles first, each summed while it is in the cache; then the structure (which holds a
  // holder's tiles' CRCs), and the payload's CRC from the pieces'.
  std::vector<std::pair<uint64_t, size_t>> tiles;
  size_t at = structure;
  for (size_t i = layout.first_stored(); i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    const size_t tile = up(b.size(), kAlign);
    std::memcpy(out + at, b.data(), b.size());
    std::memset(out + at + b.size(), 0, tile - b.size());
    tiles.emplace_back(crc_of(0, out + at, tile), tile);
    if (layout.role == Layout::Role::kHolder && i < replicated) layout.crcs[i] = tiles.back().first;
    at += tile;
  }
  layout.write(out);
  uint64_t checksum = crc_of(0, out, structure);
  for (const auto& [crc, length] : tiles) checksum = crc_combine(checksum, crc, length);
  Layout neutral = layout;  // (its ordinal is bookkeeping: not part of the state)
  neutral.ordinal = 0;
  std::vector<std::byte> neutral_structure(structure);
  neutral.write(neutral_structure.data());
  uint64_t digest = crc_of(0, neutral_structure.data(), structure);
  for (const auto& [crc, length] : tiles) digest = crc_combine(digest, crc, length);
  digest |= uint64_t{1} << 32;
  std::memcpy(region->map + kStateDigestAt + 8 * slot, &digest, 8);
  rec->step = step;
  rec->size = payload;
  rec->checksum = checksum;
  rec->sequence = sequence;
  rec->structure_size = structure;
  rec->metadata_size = 0;
  rec->world_size = static_cast<uint64_t>(env_int("WORLD_SIZE", 1));
  const uint64_t took = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - started)
                            .count();
  std::memcpy(region->map + kSaveTime + 8 * slot, &took, 8);
  std::atomic_thread_fence(std::memory_order_release);
  rec->state = kCommitted;   // last: now it counts
  if (grown) adopt(region);  // the larger region holds a complete checkpoint: it takes over
  return true;
}

bool save(int64_t step, const std::vector<std::span<std::byte>>& buffers, size_t replicated) {
  std::vector<std::span<const std::byte>> in(buffers.begin(), buffers.end());
  return save(step, in, replicated);
}

std::optional<int64_t> load(const std::vector<std::span<std::byte>>& buffers) {
  const std::string folder = env_or("DDPRUN_CHECKPOINT_DIR", "");
  const std::string agreed = env_or("DDPRUN_CHECKPOINT_STEP", "");
  if (folder.empty() || agreed.empty()) return std::nullopt;
  const int64_t step = std::stoll(agreed);
  const std::string path = region_path(folder);
  const Region* region = own_region(folder);
  if (region == nullptr) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} (agreed by the agents) is not in {}", step, path));
  }
  // This global rank's own slot of the step, saved at this world size: anything else is refused.
  const int64_t rank = env_int("RANK", 0);
  const auto world = static_cast<uint64_t>(env_int("WORLD_SIZE", 1));
  const auto saved_world =
      static_cast<uint64_t>(env_int("DDPRUN_CHECKPOINT_WORLD", static_cast<int64_t>(world)));
  if (saved_world != world && static_cast<uint64_t>(rank) >= saved_world) {
    throw CheckpointError(fmt::format(
        "checkpoint: step {} was saved by a job of {} ranks and this one has {}: rank {} has no "
        "counterpart in it, and a rank's buffers cannot be resharded",
        step, saved_world, world, rank));
  }
  int slot = -1, other = -1;
  for (int s : {0, 1}) {  // (a step saved twice: the newer save)
    if (region->record(s)->state != kCommitted || region->record(s)->step != step) continue;
    int& found = region->rank(s) == rank ? slot : other;
    if (found < 0 || region->record(s)->sequence > region->record(found)->sequence) found = s;
  }
  if (slot < 0 && other >= 0) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} in {} holds global rank {}'s state, not this rank's ({}): "
                    "refused",
                    step, path, region->rank(other), rank));
  }
  if (slot < 0) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} (agreed by the agents) is not in {}", step, path));
  }
  const Record* rec = region->record(slot);
  if (rec->world_size != saved_world) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} in {} was saved by rank {} of {} ranks, not of the {} the "
                    "agents agreed on: refused",
                    step, path, rank, rec->world_size, saved_world));
  }
  const std::byte* in = region->payload(slot);
  if (rec->size > region->slot_size || crc_of(0, in, rec->size) != rec->checksum) {
    throw CheckpointError(fmt::format("checkpoint: step {} in {} fails its checksum", step, path));
  }
  const std::optional<Layout> layout = Layout::read(in, rec->structure_size);
  bool same = layout && layout->sizes.size() == buffers.size();
  for (size_t i = 0; same && i < buffers.size(); ++i) same = layout->sizes[i] == buffers[i].size();
  if (!same) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} in {} was not saved from {} buffers of these sizes", step,
                    path, buffers.size()));
  }
  std::optional<HolderSlot> holder;  // where the replicated buffers are local rank 0's
  if (layout->role == Layout::Role::kReferrer) {
    holder.emplace(folder, step, region->run(slot), rec->world_size, *layout);
  }
  size_t at = rec->structure_size;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (i < layout->first_stored()) {
      std::memcpy(buffers[i].data(), holder->buffer(i), buffers[i].size());
      continue;
    }
    std::memcpy(buffers[i].data(), in + at, buffers[i].size());
    at += up(buffers[i].size(), kAlign);
  }
  if (holder && !holder->still_there()) {
    throw CheckpointError(
        fmt::format("checkpoint: step {}: global rank {}'s slot holding this rank's replicated "
                    "buffers was overwritten while it was read: the buffers are not step {}'s",
                    step, layout->holder, step));
  }
  return step;
}

}  // namespace ddp::checkpoint
