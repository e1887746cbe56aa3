#pragma once
// The checkpoint copies' file I/O: whole reads and writes at an offset that throw
// std::system_error naming the file, and descriptors, partial files and mappings released on
// scope exit.
// Private to the agent.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>

namespace ddprun::agent {

// Throws std::system_error from errno, with `what`.
[[noreturn]] void fail_io(const std::string& what);

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd();
  Fd(Fd&& other) noexcept : fd(std::exchange(other.fd, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// A file removed on scope exit unless kept.
struct Partial {
  std::filesystem::path path;
  bool kept = false;
  explicit Partial(std::filesystem::path p) : path(std::move(p)) {}
  ~Partial();
  Partial(const Partial&) = delete;
  Partial& operator=(const Partial&) = delete;
};

// A file's first `bytes` bytes mapped shared, readable and writable, every page mapped at once;
// unmapped on scope exit. Null, of size 0, where it cannot be mapped. The caller sees to it that
// the file keeps those bytes' memory while mapped (reserved, never truncated): else a write faults.
class Mapping {
 public:
  Mapping(int fd, uint64_t bytes);
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* get() const { return base_; }
  uint64_t size() const { return bytes_; }

 private:
  char* base_ = nullptr;
  uint64_t bytes_ = 0;
};

// open(2) with O_CLOEXEC and mode 0600; throws when it fails.
int open_or_fail(const std::filesystem::path& p, int flags);
// Exactly `n` bytes at `at`; throws (end of file included).
void read_all(int fd, char* p, size_t n, uint64_t at, const std::filesystem::path& name);
void write_all(int fd, const char* p, size_t n, uint64_t at, const std::filesystem::path& name);
// Exactly `n` bytes of `in` at `from` written into `out` at `to` by the kernel (copy_file_range(2):
// no pass through a buffer); false, nothing copied, where the kernel cannot copy between the two
// files; throws where reading or writing fails (the source's end included).
bool copy_range(int in, uint64_t from, int out, uint64_t to, size_t n,
                const std::filesystem::path& in_name, const std::filesystem::path& out_name);

}  // namespace ddprun::agent
