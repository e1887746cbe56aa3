#pragma once
// The node's in-memory checkpoints: one folder per agent run, made here at start (mode 0700, in
// /dev/shm, or $DDPRUN_SHM_DIR where set) and removed with the agent, after a SIGKILL by its
// guardian; one whose agent and guardian died together is removed by the next agent on the node
// (node/owned_folders.hpp). In it ddprun's Python modules ("python/", workers/python_package.hpp)
// and each local rank's region, "rank<L>", which the worker's first save makes
// (ddprun/checkpoint.py, whose docstring gives the layout) and which outlives the worker: a
// restarted one finds it. The agent reads the regions' headers only.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/region_format.hpp"

namespace ddprun::agent {

class CheckpointRegions {
 public:
  // Makes the folder ("ddprun-checkpoints-<run id>-XXXXXX": a new job never meets another's
  // regions). Throws std::system_error when it cannot.
  explicit CheckpointRegions(const std::string& run_id);
  ~CheckpointRegions();
  CheckpointRegions(const CheckpointRegions&) = delete;
  CheckpointRegions& operator=(const CheckpointRegions&) = delete;

  const std::string& path() const { return path_; }
  // Local rank `local_rank`'s region header; nullopt where it has no region.
  std::optional<RegionHeader> header(int local_rank) const;
  // The steps committed in local rank `local_rank`'s region, oldest first (none, one or two);
  // none where it has no region or the file is not one.
  std::vector<int64_t> steps_held(int local_rank) const;
  // The bytes the node's regions take.
  uint64_t bytes_held() const;
  // Prometheus text, read from the regions now: the bytes they take and each of the agent's
  // `local_ranks`' newest committed step (-1: none).
  std::string metrics(const std::vector<int>& local_ranks) const;

  // The steps a region's header (its first kRegionHeaderRead bytes or more, as read) says are
  // committed, oldest first.
  static std::vector<int64_t> committed_steps(const std::string& header);

 private:
  std::string path_;
};

}  // namespace ddprun::agent
