#pragma once
// A file's bytes read one chunk ahead of whoever sends them, on a thread of its own, so that the
// next chunk is read (and added to the copy's MAC) while this one goes out: a copy's sender
// (peer_link.hpp) then moves bytes at the network's pace, not at the network's plus the reads'.
// Never more than two chunks held (as AppendBehind, slot_file.hpp, on the receiving side). Private
// to the agent.
#include <array>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace ddprun::agent {

class CopyMac;

class ReadAhead {
 public:
  // `n` bytes of `fd` from `offset` (named `name` in errors), in chunks of at most `chunk` bytes,
  // each added to `mac` where there is one, in order, before it is handed out; `fd` and `mac`
  // outlive this. Reading begins at once.
  ReadAhead(int fd, uint64_t offset, uint64_t n, size_t chunk, CopyMac* mac,
            std::filesystem::path name);
  ~ReadAhead();  // stops after the chunk being read
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // The next chunk, valid until the next call; empty once every byte was handed out. Rethrows
  // what reading it threw (std::system_error naming the file: the end of the file included).
  std::string_view next();

 private:
  void run();

  const int fd_;
  const uint64_t offset_, n_;
  const size_t chunk_;
  CopyMac* const mac_;
  const std::filesystem::path name_;
  std::array<std::string, 2> buffers_;
  std::array<size_t, 2> ready_{};  // bytes read into each buffer and not handed out yet (0: none)
  int held_ = -1;                  // the buffer the caller holds
  uint64_t handed_ = 0;            // bytes handed out
  bool stop_ = false;
  std::exception_ptr error_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::thread thread_;  // (none where there is nothing to read)
};

}  // namespace ddprun::agent
