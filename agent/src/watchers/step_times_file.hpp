#pragma once
// A worker's step times for the straggler check: a file of four little-endian u64, one per worker,
// named by DDPRUN_STEP_TIMES_FILE in its environment. The worker (ddprun's Python package, or
// libddp) writes, after each of its training steps: a sequence count (odd while it writes), the
// steps it timed, their total time and the part of it it waited for its peers in collectives
// (ns). The agent reads it on its own schedule. Private to the agent.
#include <cstdint>
#include <optional>
#include <string>

namespace ddprun::agent {

// What a worker's file says: totals since the worker started.
struct StepTotals {
  uint64_t steps = 0;
  uint64_t step_ns = 0;
  uint64_t wait_ns = 0;
};

class StepTimesFile {
 public:
  // Creates the file (mode 0600, zeros), replacing what is there. Throws std::system_error.
  explicit StepTimesFile(std::string path);
  // Removes it.
  ~StepTimesFile();
  StepTimesFile(const StepTimesFile&) = delete;
  StepTimesFile& operator=(const StepTimesFile&) = delete;

  const std::string& path() const { return path_; }
  // The totals as the worker last wrote them whole; nullopt while it is writing them (twice in a
  // row), or where what it wrote cannot be totals (a wait longer than the steps).
  std::optional<StepTotals> read() const;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace ddprun::agent
