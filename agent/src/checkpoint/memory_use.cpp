#include "checkpoint/memory_use.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>

#include <set>
#include <string>
#include <system_error>
#include <utility>

#include "ddprun/store/metrics_server.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;

namespace {

// Files with more than one name (a copy held for a peer linked to a kept one, peer_copies.hpp)
// seen so far in one measurement: counted once.
using Seen = std::set<std::pair<dev_t, ino_t>>;

uint64_t allocated(const fs::path& file, Seen& seen) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  if (st.st_nlink > 1 && !seen.emplace(st.st_dev, st.st_ino).second) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

uint64_t allocated_under(const fs::path& folder, Seen& seen) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    total += allocated(it->path(), seen);
  }
  return total;
}

int open_budget(const fs::path& root) {
  const int fd = ::open((root / ".budget").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), (root / ".budget").string());
  return fd;
}
}  // namespace

BudgetLock::BudgetLock(const fs::path& root) : fd_(open_budget(root)) {
  while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
  owns_ = true;
}

BudgetLock::BudgetLock(const fs::path& root, std::try_to_lock_t) : fd_(open_budget(root)) {
  owns_ = ::flock(fd_, LOCK_EX | LOCK_NB) == 0;
}

BudgetLock::~BudgetLock() { ::close(fd_); }

nlohmann::json CheckpointMemory::to_json() const {
  return {{"regions", regions}, {"kept", kept},       {"peers", peers},
          {"restore", restore}, {"staging", staging}, {"total", total()}};
}

uint64_t file_memory(const fs::path& file) {
  Seen none;
  return allocated(file, none);
}

CheckpointMemory checkpoint_memory(const fs::path& root) {
  CheckpointMemory m;
  Seen seen;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "kept") {
      m.kept += allocated_under(e.path(), seen);
    } else if (name == "restore") {
      m.restore += allocated_under(e.path(), seen);
    } else if (name.starts_with(".persist.")) {
      m.staging += allocated(e.path(), seen);
    } else if (name != "peers") {
      // rank<L>, a grown one's rank<L>.new, the folder's .owner, and the room held for a worker's
      // region (.room-L.granted)
      m.regions += allocated(e.path(), seen);
    }
  }
  // Last: a copy held as a link to a kept one costs nothing more while that is kept.
  m.peers = allocated_under(root / "peers", seen);
  return m;
}

std::string checkpoint_memory_metrics(const fs::path& root, std::optional<uint64_t> limit) {
  const nlohmann::json parts = checkpoint_memory(root).to_json();
  std::string out;
  bool first = true;
  for (const auto& [part, bytes] : parts.items()) {
    if (part == "total") continue;
    out += store::prometheus_sample(
        "ddprun_checkpoint_memory_bytes", "gauge",
        first ? "What the node's checkpoints take of its memory, part by part (regions, kept, "
                "peers, restore, staging), against ddprun_checkpoint_memory_limit_bytes."
              : "",
        bytes.get<double>(), "part=\"" + part + "\"");
    first = false;
  }
  return out + store::prometheus_sample(
                   "ddprun_checkpoint_memory_limit_bytes", "gauge",
                   "The node's checkpoint budget (--checkpoint_memory_limit; 0: none).",
                   limit ? static_cast<double>(*limit) : 0.0);
}

std::optional<uint64_t> default_checkpoint_budget(const fs::path& folder) {
  struct statvfs fs {};
  if (::statvfs(folder.c_str(), &fs) != 0 || fs.f_blocks == 0) return std::nullopt;
  return static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize / 2;
}

}  // namespace ddprun::agent
