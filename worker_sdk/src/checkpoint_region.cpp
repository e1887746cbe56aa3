#include "checkpoint_region.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <libdeflate.h>
#include <zlib.h>

#include "ddp/errors.hpp"

namespace ddp::checkpoint {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Region> g_region;  // this process's mapping of its rank's region

std::unique_ptr<Region> map_region(const std::string& path, size_t slot_size, bool create,
                                   bool writable = true) {
  const int flags = (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
  const int fd = ::open(path.c_str(), flags, 0600);
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
  void* m = ::mmap(nullptr, length, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED | (create ? MAP_POPULATE : 0), fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    throw CheckpointError(fmt::format("checkpoint: cannot map {}: {}", path, std::strerror(errno)));
  }
  auto r = std::make_unique<Region>();
  r->path = path;
  r->slot_size = slot_size;
  r->map = static_cast<std::byte*>(m);
  r->length = length;
  if (create) {
    std::memcpy(r->map, kMagic, 8);
    const uint64_t size = slot_size;
    std::memcpy(r->map + 8, &size, 8);
  }
  return r;
}

uint64_t held_by_others(const std::string& folder, const std::string& own) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    if (e.path().string() != own && e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

std::unique_ptr<Region> g_grown;  // a larger region being saved into, until adopted

}  // namespace

uint64_t crc_of(uint64_t crc, const std::byte* p, size_t n) {
  return libdeflate_crc32(static_cast<uint32_t>(crc), p, n);
}

uint64_t crc_combine(uint64_t a, uint64_t b, size_t b_length) {
  return crc32_combine64(static_cast<uLong>(a), static_cast<uLong>(b),
                         static_cast<z_off64_t>(b_length));
}

uint64_t tile_crc(const std::byte* p, size_t n) {
  static constexpr std::byte kZeros[kAlign] = {};
  return crc_of(crc_of(0, p, n), kZeros, up(n, kAlign) - n);
}

uint64_t run_tag(const std::string& text) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  return h;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtoll(v, nullptr, 10) : fallback;
}

Region::~Region() {
  if (map != nullptr) ::munmap(map, length);
}

std::unique_ptr<Region> existing_region(const std::string& path, bool writable) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  char head[16] = {};
  const bool ok = ::pread(fd, head, sizeof head, 0) == sizeof head;
  ::close(fd);
  if (!ok || std::memcmp(head, kMagic, 8) != 0) return nullptr;
  uint64_t slot_size;
  std::memcpy(&slot_size, head + 8, 8);
  return map_region(path, slot_size, false, writable);
}

int64_t region_slot() { return env_int("DDPRUN_CHECKPOINT_SLOT", 0); }

int64_t region_slots() { return env_int("DDPRUN_CHECKPOINT_SLOTS", 1); }

std::string region_path(const std::string& folder) {
  return folder + "/rank" + std::to_string(region_slot());
}

Region* own_region(const std::string& folder) {
  const std::string path = region_path(folder);
  if (g_region != nullptr && g_region->path != path) g_region.reset();  // another rank's now
  if (g_region == nullptr) g_region = existing_region(path);
  return g_region.get();
}

std::pair<Region*, bool> region_for(const std::string& folder, size_t payload) {
  const std::string path = region_path(folder);
  own_region(folder);
  if (g_region != nullptr && g_region->slot_size >= payload) return {g_region.get(), false};
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
    g_grown = map_region(path + ".new", slot_size, true);
    return {g_grown.get(), true};
  }
  ::unlink(path.c_str());  // not a region: what a crashed first save left
  g_region = map_region(path, slot_size, true);
  return {g_region.get(), false};
}

void adopt(Region* grown) {
  if (grown != g_grown.get() || g_region == nullptr) return;
  ::rename(grown->path.c_str(), g_region->path.c_str());
  grown->path = g_region->path;
  g_region = std::move(g_grown);
}

}  // namespace ddp::checkpoint
