#include "ddp/heartbeat.hpp"

#include <cstdint>
#include <cstdlib>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace ddp {
namespace {

uint64_t* map_counter() {
  const char* path = std::getenv("DDPRUN_HEARTBEAT_FILE");
  if (path == nullptr || *path == '\0') return nullptr;
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* p = ::mmap(nullptr, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<uint64_t*>(p);
}

}  // namespace

void heartbeat() noexcept {
  static uint64_t* const counter = map_counter();
  if (counter != nullptr) __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

}  // namespace ddp
