#include "checkpoint/kept_steps.hpp"

#include <algorithm>
#include <system_error>

#include <fmt/format.h>

#include "checkpoint/memory_use.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/slot_file.hpp"
#include "checkpoint/spare_pages.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;

namespace {

// What is copied at once: a multiple of 8 (the payload is summed in whole words), read into a
// buffer that stays in the cache to be summed and stored on (measured here, 240 MiB: 512 KiB and
// 256 KiB the same, 1 MiB 10% more CPU).
constexpr size_t kStageChunk = 512 << 10;

}  // namespace

void StageEpochs::abandon() {
  std::lock_guard lock(committing_);
  ++epoch_;
}

RankStage stage_rank(const fs::path& regions, const RankSlot& slot, int64_t step,
                     const fs::path& kept_step, std::optional<uint64_t> limit, StageEpochs& epochs,
                     uint64_t began, uint64_t spares_most) {
  RankStage out;
  const auto abandoned = [&] {
    out.error = fmt::format("local rank {}'s copy of step {} was abandoned (its round is over)",
                            slot.local_rank, step);
    return out;
  };
  try {
    const fs::path region = regions / fmt::format("rank{}", slot.local_rank);
    std::optional<SlotReader> reader = SlotReader::open(region, step);
    if (!reader) {
      out.overtaken = true;
      out.error = fmt::format("local rank {} no longer holds step {} (the worker saved twice more)",
                              slot.local_rank, step);
      return out;
    }
    const SlotRecord& rec = reader->record();
    const fs::path tmp = kept_step / fmt::format(".rank_{}.tmp", slot.local_rank);
    const uint64_t wanted = allocated_for(kRegionHeader + rec.size);
    if (epochs.abandoned(began)) return abandoned();  // (before a spare is taken)
    const fs::path spares = spares_of(kept_step.parent_path());
    const bool spare = take_spare(spares, tmp, wanted);  // else new
    std::optional<BudgetLock> budget;                    // until the copy's room is reserved
    if (limit) budget.emplace(regions);
    if (const CheckpointMemory node = checkpoint_memory(regions);
        limit && node.total() + wanted - std::min(wanted, file_memory(tmp)) > *limit) {
      out.error = fmt::format(
          "no room for local rank {}'s copy of step {} ({} bytes): the node's checkpoints take {} "
          "bytes (regions {}, kept {}, copies held for peers {}) and its budget is {} bytes "
          "(--checkpoint_memory_limit)",
          slot.local_rank, step, kRegionHeader + rec.size, node.total(), node.regions, node.kept,
          node.peers, *limit);
      return out;
    }
    if (epochs.abandoned(began)) {  // (before its pages are reserved)
      if (spare) drop_to_spares(tmp, spares, spares_most);
      return abandoned();
    }
    SlotFileWriter kept(kept_step / fmt::format("rank_{}.ddpckpt", slot.local_rank), tmp,
                        reader->file_header(file_slot_size(rec.size)), kRegionHeader + rec.size,
                        fmt::format("a copy of local rank {}'s checkpoint", slot.local_rank),
                        PayloadSumKind::kCrc32, spare ? FileRoom::kOverSpare : FileRoom::kReserved);
    kept.record_digest();  // a peer holding the same bytes is not sent them
    budget.reset();
    const auto abandoned_over_spare = [&] {
      if (spare) drop_to_spares(kept.release(), spares, spares_most);
      return abandoned();
    };
    std::string buffer(std::min<uint64_t>(rec.size, kStageChunk), '\0');
    for (uint64_t done = 0; done < rec.size;) {
      if (epochs.abandoned(began)) return abandoned_over_spare();
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), rec.size - done));
      reader->copy_to(kept, done, n, buffer.data());
      done += n;
    }
    bool sound = false;
    if (!epochs.commit_unless_abandoned(began, [&] { sound = kept.commit(rec.checksum); })) {
      return abandoned_over_spare();
    }
    if (!sound || !reader->unchanged()) {
      out.overtaken = true;
      out.error = fmt::format("local rank {} reused its slot of step {} during the copy",
                              slot.local_rank, step);
      return out;
    }
    out.bytes = rec.size;
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

std::vector<int64_t> kept_steps(const fs::path& keep, int local_rank) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(keep, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0) continue;
    if (!fs::exists(e.path() / fmt::format("rank_{}.ddpckpt", local_rank), ec)) continue;
    try {
      out.push_back(std::stoll(name.substr(5)));
    } catch (const std::exception&) {
    }
  }
  return out;
}

void drop_kept(const fs::path& keep, int local_rank, const std::vector<int64_t>& except,
               uint64_t spares) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(keep, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0) continue;
    const bool wanted = std::any_of(except.begin(), except.end(),
                                    [&](int64_t s) { return name == fmt::format("step_{}", s); });
    if (wanted) continue;
    drop_to_spares(e.path() / fmt::format("rank_{}.ddpckpt", local_rank), spares_of(keep), spares);
    if (fs::is_empty(e.path(), ec)) fs::remove(e.path(), ec);
  }
}

}  // namespace ddprun::agent
