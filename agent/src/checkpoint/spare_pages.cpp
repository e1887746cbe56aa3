#include "checkpoint/spare_pages.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "checkpoint/file_io.hpp"
#include "checkpoint/memory_use.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace {

// Every spare file by the memory it takes.
std::multimap<uint64_t, fs::path> spares_in(const fs::path& spares) {
  std::multimap<uint64_t, fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(spares, ec), end; !ec && it != end; it.increment(ec)) {
    out.emplace(file_memory(it->path()), it->path());
  }
  return out;
}

// One drop or take at a time in the process (the agent's loop, the peer service's thread and the
// stage's threads all drop and take), so that the bound holds.
std::mutex one_at_a_time;

// A name no spare file in `spares` has (under one_at_a_time); where the folder cannot be looked
// at, the next name (a rename to it then fails, and says so).
fs::path fresh_name(const fs::path& spares) {
  static uint64_t named = 0;
  for (;;) {
    fs::path name = spares / fmt::format("{}", named++);
    std::error_code ec;
    if (!fs::exists(name, ec) || ec) return name;
  }
}

// What make_spare leaves free of a file system of `total` bytes: a twentieth of it, so that the
// data loaders' and NCCL's shared memory beside the checkpoints never find it full.
uint64_t left_free(uint64_t total) { return total / 20; }

// What posix_fallocate reserves at once in make_spare: a stop waits for at most one piece.
constexpr uint64_t kMakePiece = 64 << 20;

}  // namespace

fs::path spares_of(const fs::path& keep) { return keep / ".spare"; }

void drop_to_spares(const fs::path& file, const fs::path& spares, uint64_t most) {
  const std::lock_guard lock(one_at_a_time);
  std::error_code ec;
  struct stat st {};
  if (most > 0 && ::stat(file.c_str(), &st) == 0 && st.st_nlink == 1) {
    uint64_t held = static_cast<uint64_t>(st.st_blocks) * 512;
    for (const auto& [bytes, spare] : spares_in(spares)) held += bytes;
    if (held <= most) {
      fs::create_directories(spares, ec);
      const fs::path spare = fresh_name(spares);
      fs::rename(file, spare, ec);
      // Asked again once no one can link the old name: a link made to it meanwhile (a peer's copy
      // held as a link to a kept step) keeps the bytes, which are then not spare.
      if (!ec && (::stat(spare.c_str(), &st) != 0 || st.st_nlink == 1)) return;
      if (!ec) fs::remove(spare, ec);
    }
  }
  fs::remove(file, ec);
}

bool take_spare(const fs::path& spares, const fs::path& to, uint64_t bytes) {
  const std::lock_guard lock(one_at_a_time);
  std::multimap<uint64_t, fs::path> all = spares_in(spares);
  // The best fit first, then the larger ones, then the smaller ones from the largest down.
  std::vector<fs::path> order;
  for (auto it = all.lower_bound(bytes); it != all.end(); ++it) order.push_back(it->second);
  for (auto it = std::make_reverse_iterator(all.lower_bound(bytes)); it != all.rend(); ++it) {
    order.push_back(it->second);
  }
  for (const fs::path& spare : order) {
    std::error_code moved;
    fs::rename(spare, to, moved);
    if (!moved) return true;
  }
  return false;
}

bool make_spare(const fs::path& spares, const fs::path& tmp, uint64_t bytes,
                const std::atomic<bool>& stop) {
  std::error_code ec;
  // Never the file system's last pages: what it cannot hold whole, with a twentieth of it left
  // free, is not begun.
  struct statvfs fs {};
  if (::statvfs(tmp.parent_path().c_str(), &fs) != 0) return false;
  const auto free = static_cast<unsigned __int128>(fs.f_bavail) * fs.f_frsize;
  const auto total = static_cast<unsigned __int128>(fs.f_blocks) * fs.f_frsize;
  if (free < static_cast<unsigned __int128>(bytes) + left_free(static_cast<uint64_t>(total))) {
    return false;
  }
  bool made = false;
  {
    const Fd file(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    made = file.fd >= 0;
    for (uint64_t at = 0; made && at < bytes; at += kMakePiece) {
      const auto piece = static_cast<off_t>(std::min(kMakePiece, bytes - at));
      int e = EINTR;
      for (int tries = 0; e == EINTR && tries < 100 && !stop; ++tries) {  // (a signal meanwhile)
        e = ::posix_fallocate(file.fd, static_cast<off_t>(at), piece);
      }
      made = e == 0 && !stop;
    }
  }
  if (made) {
    const std::lock_guard lock(one_at_a_time);
    fs::create_directories(spares, ec);
    fs::rename(tmp, fresh_name(spares), ec);
    made = !ec;
  }
  if (!made) fs::remove(tmp, ec);
  return made;
}

std::vector<uint64_t> keep_spares_for(const fs::path& spares, const std::vector<uint64_t>& wanted,
                                      uint64_t& held) {
  const std::lock_guard lock(one_at_a_time);
  std::multimap<uint64_t, fs::path> unused = spares_in(spares);
  std::vector<uint64_t> largest_first = wanted, missing;
  std::sort(largest_first.rbegin(), largest_first.rend());
  for (const uint64_t need : largest_first) {
    if (const auto it = unused.lower_bound(need); it != unused.end()) {
      held += it->first;
      unused.erase(it);
    } else {
      missing.push_back(need);
    }
  }
  for (const auto& [bytes, spare] : unused) {
    std::error_code ec;
    fs::remove(spare, ec);
  }
  return missing;
}

std::vector<uint64_t> spare_sizes(const fs::path& spares) {
  const std::lock_guard lock(one_at_a_time);
  std::vector<uint64_t> sizes;
  for (const auto& [bytes, spare] : spares_in(spares)) sizes.push_back(bytes);
  std::reverse(sizes.begin(), sizes.end());
  return sizes;
}

uint64_t spare_memory(const fs::path& spares) {
  const std::lock_guard lock(one_at_a_time);
  uint64_t bytes = 0;
  for (const auto& [held, spare] : spares_in(spares)) bytes += held;
  return bytes;
}

uint64_t drop_spares(const fs::path& spares) {
  const std::lock_guard lock(one_at_a_time);
  uint64_t freed = 0;
  for (const auto& [bytes, spare] : spares_in(spares)) {
    std::error_code ec;
    if (fs::remove(spare, ec)) freed += bytes;
  }
  return freed;
}

}  // namespace ddprun::agent
