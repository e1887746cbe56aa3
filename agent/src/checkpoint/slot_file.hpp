#pragma once
// One committed slot as a stream of bytes, both ways: read out of a worker's region while the
// worker may save again (SlotReader), and written into a file of the region layout from bytes
// that arrive in pieces (SlotFileWriter: a region restored, a peer's copy received). Private to
// the agent.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/file_io.hpp"
#include "checkpoint/payload_digest.hpp"
#include "checkpoint/region_format.hpp"

namespace ddprun::agent {

// Step `step`'s slot of the region file `region`, read in place. The worker is not locked out:
// unchanged() says afterwards whether it reused the slot meanwhile.
class SlotReader {
 public:
  // nullopt where the region has no committed slot of `step` (or is not a region); throws
  // std::system_error when it cannot be opened.
  static std::optional<SlotReader> open(const std::filesystem::path& region, int64_t step);

  const SlotRecord& record() const { return record_; }
  uint64_t save_micros() const { return save_micros_; }
  // A header of the region layout holding the slot as slot 0 (region_header_for), in a slot of
  // `slot_size` bytes.
  std::string file_header(uint64_t slot_size) const;
  // `n` payload bytes from `at`.
  void read(uint64_t at, char* p, size_t n) const;
  // Whether the slot still holds what it held when opened (same step, same commit).
  bool unchanged() const;

 private:
  SlotReader(std::filesystem::path region, int fd) : region_(std::move(region)), fd_(fd) {}
  std::filesystem::path region_;
  Fd fd_;
  int slot_ = -1;
  uint64_t slot_at_ = 0;
  SlotRecord record_;
  uint64_t save_micros_ = 0;
};

// A file of the region layout written as its bytes arrive: made under `tmp` with `reserve` bytes
// reserved first (so that a full /dev/shm fails here, never as a SIGBUS later), the kRegionHeader
// bytes of `header` at its start and the payload after them, summed as it comes (by `arriving`,
// the kind of checksum its source has, and by its CRC); renamed to `path` only once complete and
// matching the checksum, with its CRC as the file's checksum. Removed unless committed.
class SlotFileWriter {
 public:
  // Throws std::system_error; where there is no room, its message names `what` and the size.
  SlotFileWriter(std::filesystem::path path, std::filesystem::path tmp, const std::string& header,
                 uint64_t reserve, const std::string& what,
                 PayloadSumKind arriving = PayloadSumKind::kCrc32);
  SlotFileWriter(const SlotFileWriter&) = delete;
  SlotFileWriter& operator=(const SlotFileWriter&) = delete;

  // From now on, the payload's digest (payload_digest.hpp) is summed as it comes too, and
  // written into the file's header at commit. Before the first append.
  void record_digest();
  // The next `n` payload bytes (whole 8-byte words, except at the end).
  void append(const char* p, size_t n);
  uint64_t written() const { return written_; }
  // Renames the file into place if its payload sums to `checksum` (of the arriving kind); false
  // (the file removed) if not.
  bool commit(uint64_t checksum);

 private:
  std::filesystem::path path_;
  Partial partial_;
  Fd fd_;
  uint64_t written_ = 0;
  PayloadSum crc_;
  std::optional<PayloadSum> arriving_;  // where the source's checksum is not a CRC
  std::unique_ptr<DigestSum> digest_;   // record_digest()
};

}  // namespace ddprun::agent
