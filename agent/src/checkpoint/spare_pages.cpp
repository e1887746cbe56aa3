#include "checkpoint/spare_pages.hpp"

#include <sys/stat.h>

#include <iterator>
#include <map>
#include <mutex>
#include <system_error>
#include <vector>

#include <fmt/format.h>

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

}  // namespace

fs::path spares_of(const fs::path& keep) { return keep / ".spare"; }

void drop_to_spares(const fs::path& file, const fs::path& spares, uint64_t most) {
  static uint64_t named = 0;
  const std::lock_guard lock(one_at_a_time);
  std::error_code ec;
  struct stat st {};
  if (most > 0 && ::stat(file.c_str(), &st) == 0 && st.st_nlink == 1) {
    uint64_t held = static_cast<uint64_t>(st.st_blocks) * 512;
    for (const auto& [bytes, spare] : spares_in(spares)) held += bytes;
    if (held <= most) {
      fs::create_directories(spares, ec);
      const fs::path spare = spares / fmt::format("{}", named++);
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
