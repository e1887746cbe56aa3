#include "checkpoint/peer_copies.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "checkpoint/memory_use.hpp"
#include "checkpoint/spare_pages.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;

namespace {

// An origin's id as a file name: its bytes in hex (ids are a node rank or host_pid_nonce, but a
// file name must not depend on that).
std::string hex(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += fmt::format("{:02x}", c);
  return out;
}

}  // namespace

PeerCopies::PeerCopies(fs::path dir, std::optional<uint64_t> limit)
    : dir_(std::move(dir)), limit_(limit) {
  fs::create_directories(dir_);
  fs::permissions(dir_, fs::perms::owner_all);
}

PeerCopies::~PeerCopies() {
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

fs::path PeerCopies::file_for(const std::string& origin, int local_rank, int64_t step) const {
  return dir_ / fmt::format("{}.rank{}.step{}.ddpckpt", hex(origin), local_rank, step);
}

uint64_t PeerCopies::drop(std::vector<Copy>& copies, size_t i, bool for_room) {
  struct stat st {};
  const bool last_name = ::stat(copies[i].file.c_str(), &st) == 0 && st.st_nlink == 1;
  drop_to_spares(copies[i].file, spares_, for_room ? 0 : spares_most_);
  bytes_ -= copies[i].bytes;
  copies.erase(copies.begin() + static_cast<std::ptrdiff_t>(i));
  return for_room && last_name ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

void PeerCopies::spare_pages(fs::path spares, uint64_t most) {
  std::lock_guard lock(mutex_);
  spares_ = std::move(spares);
  spares_most_ = most;
}

uint64_t PeerCopies::spare_room() const {
  std::lock_guard lock(mutex_);
  return spares_most_;
}

void PeerCopies::add_copy(std::vector<Copy>& copies, Copy copy) {
  std::erase_if(copies, [&](const Copy& c) {  // the same step again: its file was replaced
    if (c.step != copy.step) return false;
    bytes_ -= c.bytes;
    return true;
  });
  bytes_ += copy.bytes;
  copies.push_back(std::move(copy));
  std::sort(copies.begin(), copies.end(),
            [](const Copy& a, const Copy& b) { return a.step < b.step; });
  while (copies.size() > 2) drop(copies, 0);
}

std::unique_ptr<SlotFileWriter> PeerCopies::begin(const std::string& origin, int local_rank,
                                                  int64_t step, const std::string& header,
                                                  uint64_t file_bytes) {
  const fs::path file = file_for(origin, local_rank, step);
  std::optional<BudgetLock> budget;  // until the copy's room is reserved
  if (limit_) budget.emplace(dir_.parent_path());
  {
    std::lock_guard lock(mutex_);
    const Key key{origin, local_rank};
    if (reserved_.contains(key)) {
      throw std::runtime_error(fmt::format(
          "a copy of local rank {} of node {} is being received already", local_rank, origin));
    }
    std::vector<Copy>& copies = held_[key];
    // Measured under the budget's lock: every copy under way has its room reserved already.
    CheckpointMemory node;
    if (limit_) node = checkpoint_memory(dir_.parent_path());
    const auto over = [&] { return limit_ && node.total() + allocated_for(file_bytes) > *limit_; };
    if (over() && spares_most_ > 0) {  // pages held for the next stage, before any copy
      drop_spares(spares_);
      node = checkpoint_memory(dir_.parent_path());
    }
    if (over() && copies.size() > 1) {
      drop(copies, 0, true);
      node = checkpoint_memory(dir_.parent_path());
    }
    if (over()) {
      throw std::runtime_error(fmt::format(
          "no room for a copy of {} bytes of local rank {} of node {}: the node's checkpoints take "
          "{} bytes (copies held for peers {}, regions {}, kept for peers {}, restore {}, "
          "staging {}) and its budget is {} bytes (--checkpoint_memory_limit)",
          file_bytes, local_rank, origin, node.total(), node.peers, node.regions, node.kept,
          node.restore, node.staging, *limit_));
    }
    reserved_[key] = file_bytes;
  }
  try {
    return std::make_unique<SlotFileWriter>(
        file, dir_ / ("." + file.filename().string() + ".tmp"), header, file_bytes,
        fmt::format("a copy of local rank {} of node {}", local_rank, origin));
  } catch (...) {
    std::lock_guard lock(mutex_);
    reserved_.erase({origin, local_rank});
    throw;
  }
}

bool PeerCopies::current(int round) const {
  std::lock_guard lock(mutex_);
  return round >= timeline_;
}

bool PeerCopies::committed(const std::string& origin, int local_rank, int rank, int world,
                           int64_t step, uint64_t file_bytes, int round) {
  std::lock_guard lock(mutex_);
  const Key key{origin, local_rank};
  reserved_.erase(key);
  const fs::path file = file_for(origin, local_rank, step);
  if (round < timeline_) {
    // (Not where a copy held is that file: the restore kept that step.)
    const auto it = held_.find(key);
    const bool listed =
        it != held_.end() && std::any_of(it->second.begin(), it->second.end(),
                                         [&](const Copy& c) { return c.file == file; });
    std::error_code ignored;
    if (!listed) fs::remove(file, ignored);
    return false;
  }
  add_copy(held_[key], Copy{step, rank, world, file_bytes, file, std::nullopt});
  return true;
}

bool PeerCopies::linked(const std::string& origin, int local_rank, const SlotRecord& record,
                        const PayloadDigest& digest, const fs::path& same, int round) {
  std::lock_guard lock(mutex_);
  const Key key{origin, local_rank};
  if (reserved_.contains(key) || round < timeline_) return false;
  const fs::path file = file_for(origin, local_rank, record.step);
  const fs::path tmp = dir_ / ("." + file.filename().string() + ".link");
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_hard_link(same, tmp, ec);
  if (ec) return false;  // dropped meanwhile
  // What the link holds now, not what `same` held when it was found.
  const bool same_bytes = holds_payload(tmp, record, digest);
  if (!same_bytes) {
    fs::remove(tmp, ec);
    return false;
  }
  fs::rename(tmp, file, ec);
  const bool renamed = !ec;
  fs::remove(tmp, ec);  // (left where `file` was a link to the same file already)
  if (!renamed) return false;
  add_copy(held_[key],
           Copy{record.step, static_cast<int>(record.rank), static_cast<int>(record.world_size),
                kRegionHeader + record.size, file, record});
  return true;
}

void PeerCopies::abandoned(const std::string& origin, int local_rank) {
  std::lock_guard lock(mutex_);
  reserved_.erase({origin, local_rank});
}

void PeerCopies::keep_only(const std::vector<std::string>& origins) {
  std::lock_guard lock(mutex_);
  for (auto& [key, copies] : held_) {
    if (std::find(origins.begin(), origins.end(), key.first) != origins.end()) continue;
    while (!copies.empty()) drop(copies, 0);
  }
  std::erase_if(held_, [](const auto& entry) { return entry.second.empty(); });
}

uint64_t PeerCopies::drop_oldest(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  uint64_t freed = 0;
  while (freed < bytes) {
    // The oldest copy whose memory is its own (a link to a kept copy frees nothing).
    std::vector<Copy>* oldest = nullptr;
    size_t at = 0;
    for (auto& [key, copies] : held_) {
      for (size_t i = 0; i < copies.size(); ++i) {
        struct stat st {};
        const bool own = ::stat(copies[i].file.c_str(), &st) != 0 || st.st_nlink == 1;
        if (own && (!oldest || copies[i].step < (*oldest)[at].step)) {
          oldest = &copies;
          at = i;
        }
      }
    }
    if (!oldest) break;
    freed += drop(*oldest, at, true);
  }
  std::erase_if(held_, [](const auto& entry) { return entry.second.empty(); });
  return freed;
}

void PeerCopies::drop_after(std::optional<int64_t> step, int round) {
  std::lock_guard lock(mutex_);
  timeline_ = std::max(timeline_, round);
  for (auto& [key, copies] : held_) {
    for (size_t i = copies.size(); i-- > 0;) {
      if (!step || copies[i].step > *step) drop(copies, i);
    }
  }
  std::erase_if(held_, [](const auto& entry) { return entry.second.empty(); });
}

std::vector<PeerCopies::Copy> PeerCopies::all() const {
  std::lock_guard lock(mutex_);
  std::vector<Copy> out;
  for (const auto& [key, copies] : held_) out.insert(out.end(), copies.begin(), copies.end());
  return out;
}

std::optional<PeerCopies::Copy> PeerCopies::find(const std::string& origin, int local_rank,
                                                 int64_t step) const {
  std::lock_guard lock(mutex_);
  const auto it = held_.find({origin, local_rank});
  if (it == held_.end()) return std::nullopt;
  for (const Copy& c : it->second) {
    if (c.step == step) return c;
  }
  return std::nullopt;
}

std::map<std::string, std::vector<std::vector<int64_t>>> PeerCopies::steps() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, std::vector<std::vector<int64_t>>> out;
  for (const auto& [key, copies] : held_) {
    if (copies.empty()) continue;
    auto& ranks = out[key.first];
    if (ranks.size() <= static_cast<size_t>(key.second)) ranks.resize(key.second + 1);
    for (const Copy& c : copies) ranks[key.second].push_back(c.step);
  }
  return out;
}

uint64_t PeerCopies::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace ddprun::agent
