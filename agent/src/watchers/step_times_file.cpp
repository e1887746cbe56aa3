#include "watchers/step_times_file.hpp"

#include <array>
#include <cerrno>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace ddprun::agent {
namespace {

using StepRecord = std::array<uint64_t, 4>;  // seq, steps, step_ns, wait_ns (little-endian hosts)

bool read_record(int fd, StepRecord& r) {
  return ::pread(fd, r.data(), sizeof r, 0) == static_cast<ssize_t>(sizeof r);
}

}  // namespace

StepTimesFile::StepTimesFile(std::string path) : path_(std::move(path)) {
  ::unlink(path_.c_str());
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const StepRecord zero{};
  if (fd_ < 0 || ::pwrite(fd_, zero.data(), sizeof zero, 0) != static_cast<ssize_t>(sizeof zero)) {
    const int e = errno;
    if (fd_ >= 0) ::close(fd_);
    throw std::system_error(e, std::generic_category(), "step times file " + path_);
  }
}

StepTimesFile::~StepTimesFile() {
  ::close(fd_);
  ::unlink(path_.c_str());
}

std::optional<StepTotals> StepTimesFile::read() const {
  // A sequence lock: a record read whole, with an even count, twice the same, was not being
  // written.
  for (int tries = 0; tries < 3; ++tries) {
    StepRecord first{};
    StepRecord second{};
    if (!read_record(fd_, first) || !read_record(fd_, second)) return std::nullopt;
    if (first != second || first[0] % 2 != 0) continue;
    if (first[3] > first[2]) return std::nullopt;
    return StepTotals{first[1], first[2], first[3]};
  }
  return std::nullopt;
}

}  // namespace ddprun::agent
