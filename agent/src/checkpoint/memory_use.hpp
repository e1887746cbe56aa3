#pragma once
// What a node's in-memory checkpoints take of the memory file system holding them (/dev/shm), part
// by part, and the one budget every part shares (--checkpoint_memory_limit; by default half the
// size of that file system). Every part counts: the workers' regions, the copies of the node's own
// steps kept for its peers (kept/, with the pages of dropped ones held for the next: kept/.spare,
// spare_pages.hpp), the copies it holds for other nodes (peers/), the steps a restore gathers
// (restore/) and the staging of a copy to --checkpoint_dir (beside the regions).
// Bytes allocated, as df counts them (a region is reserved whole when made). The workers count the
// same (ddprun/checkpoint.py) before making or growing a region. Private to the agent.
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ddprun::agent {

struct CheckpointMemory {
  uint64_t regions = 0;
  uint64_t kept = 0;
  uint64_t peers = 0;
  uint64_t restore = 0;
  uint64_t staging = 0;

  uint64_t total() const { return regions + kept + peers + restore + staging; }
  // {"regions", "kept", "peers", "restore", "staging", "total"}: bytes.
  nlohmann::json to_json() const;
};

// Held while a part of the node's checkpoints is measured against the budget and its room
// reserved: the workers take the same lock (an flock on `root`/.budget, ddprun/checkpoint.py)
// before making a region, so that two never both take the last room.
class BudgetLock {
 public:
  // Waits for the lock. Throws std::system_error where the lock file cannot be made.
  explicit BudgetLock(const std::filesystem::path& root);
  // Takes the lock only where it is free now (owns() says whether it did): for the agent's event
  // loop, which must never wait on a worker (one stopped for a stack dump may hold it). Throws as
  // above.
  BudgetLock(const std::filesystem::path& root, std::try_to_lock_t);
  ~BudgetLock();
  BudgetLock(const BudgetLock&) = delete;
  BudgetLock& operator=(const BudgetLock&) = delete;

  bool owns() const { return owns_; }

 private:
  int fd_ = -1;
  bool owns_ = false;
};

// What `file` takes of memory now, whatever other names it has (0: none, or gone).
uint64_t file_memory(const std::filesystem::path& file);

// What a file of `bytes` bytes reserved whole takes of a memory file system (whole pages).
inline uint64_t allocated_for(uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

// Measured now in the node's checkpoint folder `root` (what cannot be read counts nothing).
CheckpointMemory checkpoint_memory(const std::filesystem::path& root);

// The default budget: half the size of the file system holding `folder`; nullopt where it cannot
// be told.
std::optional<uint64_t> default_checkpoint_budget(const std::filesystem::path& folder);

// In Prometheus' text: each part of what `root` holds now, and the budget `limit` (0: none).
std::string checkpoint_memory_metrics(const std::filesystem::path& root,
                                      std::optional<uint64_t> limit);

}  // namespace ddprun::agent
