#include "checkpoint/file_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace ddprun::agent {
namespace fs = std::filesystem;

void fail_io(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

Fd::~Fd() {
  if (fd >= 0) ::close(fd);
}

Partial::~Partial() {
  std::error_code ignored;
  if (!kept) fs::remove(path, ignored);
}

int open_or_fail(const fs::path& p, int flags) {
  const int fd = ::open(p.c_str(), flags | O_CLOEXEC, 0600);
  if (fd < 0) fail_io("cannot open " + p.string());
  return fd;
}

void read_all(int fd, char* p, size_t n, uint64_t at, const fs::path& name) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = EIO;
      fail_io("cannot read " + name.string());
    }
    p += got;
    n -= static_cast<size_t>(got);
    at += static_cast<uint64_t>(got);
  }
}

void write_all(int fd, const char* p, size_t n, uint64_t at, const fs::path& name) {
  while (n > 0) {
    const ssize_t put = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail_io("cannot write " + name.string());
    p += put;
    n -= static_cast<size_t>(put);
    at += static_cast<uint64_t>(put);
  }
}

}  // namespace ddprun::agent
