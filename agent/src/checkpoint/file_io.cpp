#include "checkpoint/file_io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
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

Mapping::Mapping(int fd, uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return;
  base_ = static_cast<char*>(p);
  bytes_ = bytes;
}

Mapping::~Mapping() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
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

bool copy_range(int in, uint64_t from, int out, uint64_t to, size_t n, const fs::path& in_name,
                const fs::path& out_name) {
  auto at_in = static_cast<loff_t>(from);
  auto at_out = static_cast<loff_t>(to);
  for (size_t left = n; left > 0;) {
    const ssize_t k = ::copy_file_range(in, &at_in, out, &at_out, left, 0);
    if (k > 0) {
      left -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    const bool unable = k < 0 && left == n &&
                        (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP ||
                         errno == ENOSYS || errno == EPERM);
    if (unable) return false;
    if (k == 0) errno = EIO;  // the source ended before its size
    fail_io("cannot copy " + in_name.string() + " into " + out_name.string());
  }
  return true;
}

}  // namespace ddprun::agent
