#include "step_times.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace ddp::step_times {
namespace {

struct Record {
  uint64_t seq;
  uint64_t steps;
  uint64_t step_ns;
  uint64_t wait_ns;
};

Record* map_record() {
  const char* path = std::getenv("DDPRUN_STEP_TIMES_FILE");
  if (path == nullptr || *path == '\0') return nullptr;
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* p = ::mmap(nullptr, sizeof(Record), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<Record*>(p);
}

uint64_t ns(std::chrono::steady_clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

}  // namespace

void step_ended(std::chrono::steady_clock::duration waited) noexcept {
  static Record* const record = map_record();
  static std::optional<std::chrono::steady_clock::time_point> last_end;
  const auto now = std::chrono::steady_clock::now();
  const std::optional<std::chrono::steady_clock::time_point> began = last_end;
  last_end = now;
  if (record == nullptr || !began) return;  // the first step's start is unknown
  const uint64_t step = ns(now - *began);
  const uint64_t wait = std::min(step, ns(waited));
  // A sequence lock: odd while the totals change (the agent reads again then).
  const uint64_t seq = __atomic_load_n(&record->seq, __ATOMIC_RELAXED);
  __atomic_store_n(&record->seq, seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&record->steps, record->steps + 1, __ATOMIC_RELAXED);
  __atomic_store_n(&record->step_ns, record->step_ns + step, __ATOMIC_RELAXED);
  __atomic_store_n(&record->wait_ns, record->wait_ns + wait, __ATOMIC_RELAXED);
  __atomic_store_n(&record->seq, seq + 2, __ATOMIC_RELEASE);
}

}  // namespace ddp::step_times
