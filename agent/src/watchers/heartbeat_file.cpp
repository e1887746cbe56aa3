#include "watchers/heartbeat_file.hpp"

#include <cerrno>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddprun::agent {
namespace {

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

}  // namespace

HeartbeatFile::HeartbeatFile(std::string path) : path_(std::move(path)) {
  ::unlink(path_.c_str());
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const uint64_t zero = 0;
  if (fd_ < 0 || ::pwrite(fd_, &zero, sizeof zero, 0) != sizeof zero) {
    const int e = errno;
    if (fd_ >= 0) ::close(fd_);
    throw std::system_error(e, std::generic_category(), "heartbeat file " + path_);
  }
  struct stat st {};
  if (::fstat(fd_, &st) == 0) mtime_ns_ = mtime_ns(st);
}

HeartbeatFile::~HeartbeatFile() {
  ::close(fd_);
  ::unlink(path_.c_str());
}

bool HeartbeatFile::beat() {
  // Size and time by path: a shell beats with `touch` (or `echo >`, which truncates).
  bool changed = false;
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) {
    changed = st.st_size != size_ || mtime_ns(st) != mtime_ns_;
    size_ = st.st_size;
    mtime_ns_ = mtime_ns(st);
  }
  uint64_t counter = 0;
  if (::pread(fd_, &counter, sizeof counter, 0) == sizeof counter) {
    constexpr uint64_t kEnded = uint64_t{1} << 63;
    const bool now_ended = !ended_ && (counter & kEnded) != 0;
    ended_ = ended_ || now_ended;
    counter &= ~kEnded;
    // The mark's own write changes the file's time: not a beat.
    changed = counter != counter_ || (changed && !now_ended);
    counter_ = counter;
  }
  return changed;
}

}  // namespace ddprun::agent
