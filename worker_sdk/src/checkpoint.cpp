#include "ddp/checkpoint.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <zlib.h>

#include "ddp/errors.hpp"

namespace ddp::checkpoint {
namespace {

namespace fs = std::filesystem;

// The region's layout (docs/region_format.md), as packaging/wheel/ddprun/checkpoint.py writes it
// (the agent reads the header): magic, slot size; slot i's record at 64 + 64 * i, the global rank
// that saved it at 192 + 8 * i, its run's tag at 208 + 8 * i; slot i's payload at 4096 + i * slot
// size. A C++ payload: "DDPCXX1\0", the number of buffers, their sizes (u64), padded to 64; then
// each buffer at a 64-byte boundary.
constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', '3'};
constexpr char kCxxMagic[8] = {'D', 'D', 'P', 'C', 'X', 'X', '1', '\0'};
constexpr size_t kHeader = 4096, kAlign = 64;
constexpr size_t kRankAt = 192;    // + 8 * slot: the global rank that saved it
constexpr size_t kRunAt = 208;     // + 8 * slot: its run's tag
constexpr size_t kSaveTime = 256;  // + 8 * slot: the save's duration in microseconds
constexpr uint64_t kWriting = 1, kCommitted = 2;

struct Record {  // 64 bytes at 64 + 64 * slot
  uint64_t state;
  int64_t step;
  uint64_t size;
  uint64_t checksum;
  uint64_t sequence;
  uint64_t structure_size;
  uint64_t metadata_size;  // torch.distributed.checkpoint's metadata (Python); 0 here
  uint64_t world_size;     // WORLD_SIZE at the save
};
static_assert(sizeof(Record) == 64);

size_t up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The CRC-32 of [p, p + n) continued from `crc` (a slot's checksum: zlib's CRC-32 of its payload).
uint64_t crc_of(uint64_t crc, const std::byte* p, size_t n) {
  return crc32_z(static_cast<uLong>(crc), reinterpret_cast<const Bytef*>(p), n);
}

// The 64-bit FNV-1a hash of `text` (a slot's run tag).
uint64_t run_tag(const std::string& text) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  return h;
}

struct Region {
  std::string path;
  size_t slot_size = 0;
  std::byte* map = nullptr;
  size_t length = 0;
  Record* record(int slot) const { return reinterpret_cast<Record*>(map + 64 + 64 * slot); }
  int64_t rank(int slot) const {
    int64_t r;
    std::memcpy(&r, map + kRankAt + 8 * slot, 8);
    return r;
  }
  std::byte* payload(int slot) const { return map + kHeader + slot * slot_size; }
  ~Region() {
    if (map != nullptr) ::munmap(map, length);
  }
};

Region* g_region = nullptr;  // this process's mapping of its rank's region

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string region_path(const std::string& folder) {
  return folder + "/rank" + env_or("LOCAL_RANK", "0");
}

Region* map_region(const std::string& path, size_t slot_size, bool create) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0600);
  if (fd < 0) {
    throw CheckpointError(
        fmt::format("checkpoint: cannot open {}: {}", path, std::strerror(errno)));
  }
  const size_t length = kHeader + 2 * slot_size;
  if (create) {
    if (const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(length)); e != 0) {
      ::close(fd);
      ::unlink(path.c_str());
      throw CheckpointError(fmt::format(
          "checkpoint: {} cannot hold this rank's {} bytes (two slots of {}): {}. Enlarge "
          "/dev/shm (a container: --shm-size) or lower the checkpoint's size",
          fs::path(path).parent_path().string(), length, slot_size, std::strerror(e)));
    }
  }
  void* m = ::mmap(nullptr, length, PROT_READ | PROT_WRITE,
                   MAP_SHARED | (create ? MAP_POPULATE : 0), fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    throw CheckpointError(fmt::format("checkpoint: cannot map {}: {}", path, std::strerror(errno)));
  }
  auto* r = new Region{path, slot_size, static_cast<std::byte*>(m), length};
  if (create) {
    std::memcpy(r->map, kMagic, 8);
    const uint64_t size = slot_size;
    std::memcpy(r->map + 8, &size, 8);
  }
  return r;
}

// The region a restarted worker finds, if its file is one.
Region* existing_region(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  char head[16] = {};
  const bool ok = ::pread(fd, head, sizeof head, 0) == sizeof head;
  ::close(fd);
  if (!ok || std::memcmp(head, kMagic, 8) != 0) return nullptr;
  uint64_t slot_size;
  std::memcpy(&slot_size, head + 8, 8);
  return map_region(path, slot_size, false);
}

uint64_t held_by_others(const std::string& folder, const std::string& own) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    if (e.path().string() != own && e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

// This rank's region, able to hold `payload` bytes per slot (made, or remade larger, here); the
// second member is the region it replaces once a save into it is committed (or null).
std::pair<Region*, Region*> region_for(const std::string& folder, size_t payload) {
  const std::string path = region_path(folder);
  if (g_region == nullptr) g_region = existing_region(path);
  if (g_region != nullptr && g_region->slot_size >= payload) return {g_region, nullptr};
  const size_t slot_size = up(payload + payload / 16, 1 << 20);
  const uint64_t size = kHeader + 2 * slot_size;
  const std::string limit = env_or("DDPRUN_CHECKPOINT_MEMORY_LIMIT", "");
  const uint64_t others = held_by_others(folder, path);
  if (!limit.empty() && others + size > std::stoull(limit)) {
    throw CheckpointError(fmt::format(
        "checkpoint: this rank's state needs {} bytes (two slots of {}); with the {} bytes the "
        "node's other ranks hold that is over --checkpoint_memory_limit ({} bytes)",
        size, slot_size, others, limit));
  }
  if (g_region != nullptr) {
    ::unlink((path + ".new").c_str());  // what a worker killed during such a save left
    return {map_region(path + ".new", slot_size, true), g_region};
  }
  ::unlink(path.c_str());  // not a region: what a crashed first save left
  g_region = map_region(path, slot_size, true);
  return {g_region, nullptr};
}

}  // namespace

bool save(int64_t step, const std::vector<std::span<const std::byte>>& buffers) {
  const std::string folder = env_or("DDPRUN_CHECKPOINT_DIR", "");
  if (folder.empty()) {
    static bool warned = false;
    if (!std::exchange(warned, true)) {
      std::fprintf(stderr, "ddp::checkpoint::save: not started by ddprun: nothing is saved\n");
    }
    return false;
  }
  const auto started = std::chrono::steady_clock::now();
  const size_t structure = up(16 + 8 * buffers.size(), kAlign);
  size_t payload = structure;
  for (const auto& b : buffers) payload += up(b.size(), kAlign);
  auto [region, replaces] = region_for(folder, payload);
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
  const int64_t rank = std::strtoll(env_or("RANK", "0").c_str(), nullptr, 10);
  const uint64_t tag = run_tag(env_or("TORCHELASTIC_RUN_ID", ""));
  std::memcpy(region->map + kRankAt + 8 * slot, &rank, 8);
  std::memcpy(region->map + kRunAt + 8 * slot, &tag, 8);
  std::byte* out = region->payload(slot);
  std::memset(out, 0, structure);
  std::memcpy(out, kCxxMagic, 8);
  const uint64_t count = buffers.size();
  std::memcpy(out + 8, &count, 8);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const uint64_t size = buffers[i].size();
    std::memcpy(out + 16 + 8 * i, &size, 8);
  }
  uint64_t checksum = crc_of(0, out, structure);
  size_t at = structure;
  for (const auto& b : buffers) {
    const size_t tile = up(b.size(), kAlign);
    std::memcpy(out + at, b.data(), b.size());
    std::memset(out + at + b.size(), 0, tile - b.size());
    checksum = crc_of(checksum, out + at, tile);  // while it is in the cache
    at += tile;
  }
  rec->step = step;
  rec->size = payload;
  rec->checksum = checksum;
  rec->sequence = sequence;
  rec->structure_size = structure;
  rec->metadata_size = 0;
  rec->world_size = std::strtoull(env_or("WORLD_SIZE", "1").c_str(), nullptr, 10);
  const uint64_t took = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - started)
                            .count();
  std::memcpy(region->map + kSaveTime + 8 * slot, &took, 8);
  std::atomic_thread_fence(std::memory_order_release);
  rec->state = kCommitted;    // last: now it counts
  if (replaces != nullptr) {  // the larger region holds a complete checkpoint: it takes over
    const std::string path = replaces->path;
    ::rename(region->path.c_str(), path.c_str());
    region->path = path;
    delete replaces;
    g_region = region;
  }
  return true;
}

bool save(int64_t step, const std::vector<std::span<std::byte>>& buffers) {
  std::vector<std::span<const std::byte>> in(buffers.begin(), buffers.end());
  return save(step, in);
}

std::optional<int64_t> load(const std::vector<std::span<std::byte>>& buffers) {
  const std::string folder = env_or("DDPRUN_CHECKPOINT_DIR", "");
  const std::string agreed = env_or("DDPRUN_CHECKPOINT_STEP", "");
  if (folder.empty() || agreed.empty()) return std::nullopt;
  const int64_t step = std::stoll(agreed);
  const std::string path = region_path(folder);
  if (g_region == nullptr) g_region = existing_region(path);
  if (g_region == nullptr) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} (agreed by the agents) is not in {}", step, path));
  }
  // This global rank's own slot of the step, saved at this world size: anything else is refused.
  const int64_t rank = std::strtoll(env_or("RANK", "0").c_str(), nullptr, 10);
  const uint64_t world = std::strtoull(env_or("WORLD_SIZE", "1").c_str(), nullptr, 10);
  const uint64_t saved_world = std::strtoull(
      env_or("DDPRUN_CHECKPOINT_WORLD", std::to_string(world).c_str()).c_str(), nullptr, 10);
  if (saved_world != world && static_cast<uint64_t>(rank) >= saved_world) {
    throw CheckpointError(fmt::format(
        "checkpoint: step {} was saved by a job of {} ranks and this one has {}: rank {} has no "
        "counterpart in it, and a rank's buffers cannot be resharded",
        step, saved_world, world, rank));
  }
  int slot = -1, other = -1;
  for (int s : {0, 1}) {  // (a step saved twice: the newer save)
    if (g_region->record(s)->state != kCommitted || g_region->record(s)->step != step) continue;
    int& found = g_region->rank(s) == rank ? slot : other;
    if (found < 0 || g_region->record(s)->sequence > g_region->record(found)->sequence) found = s;
  }
  if (slot < 0 && other >= 0) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} in {} holds global rank {}'s state, not this rank's ({}): "
                    "refused",
                    step, path, g_region->rank(other), rank));
  }
  if (slot < 0) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} (agreed by the agents) is not in {}", step, path));
  }
  const Record* rec = g_region->record(slot);
  if (rec->world_size != saved_world) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} in {} was saved by rank {} of {} ranks, not of the {} the "
                    "agents agreed on: refused",
                    step, path, rank, rec->world_size, saved_world));
  }
  const std::byte* in = g_region->payload(slot);
  if (rec->size > g_region->slot_size || crc_of(0, in, rec->size) != rec->checksum) {
    throw CheckpointError(fmt::format("checkpoint: step {} in {} fails its checksum", step, path));
  }
  uint64_t count = 0;
  std::memcpy(&count, in + 8, 8);
  bool same = std::memcmp(in, kCxxMagic, 8) == 0 && count == buffers.size();
  for (size_t i = 0; same && i < buffers.size(); ++i) {
    uint64_t size;
    std::memcpy(&size, in + 16 + 8 * i, 8);
    same = size == buffers[i].size();
  }
  if (!same) {
    throw CheckpointError(
        fmt::format("checkpoint: step {} in {} was not saved from {} buffers of these sizes", step,
                    path, buffers.size()));
  }
  size_t at = rec->structure_size;
  for (const auto& b : buffers) {
    std::memcpy(b.data(), in + at, b.size());
    at += up(b.size(), kAlign);
  }
  return step;
}

}  // namespace ddp::checkpoint
