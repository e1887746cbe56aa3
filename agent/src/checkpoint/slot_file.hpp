#pragma once
// One committed slot as a stream of bytes, both ways: copied out of a worker's region while the
// worker may save again (SlotReader), and written into a file of the region layout from bytes
// that arrive in pieces or are copied in (SlotFileWriter: a region restored, a peer's copy
// received, a kept copy staged). Private to the agent.
#include <array>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "checkpoint/file_io.hpp"
#include "checkpoint/payload_digest.hpp"
#include "checkpoint/region_format.hpp"

namespace ddprun::agent {

class SlotFileWriter;

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
  // `n` payload bytes from `at` appended to `out` (SlotFileWriter::append_from).
  void copy_to(SlotFileWriter& out, uint64_t at, size_t n, char* scratch) const;
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

// How a file written as its bytes arrive gets its memory: all of it reserved first (kReserved:
// where other copies are sized against the node's budget meanwhile); the same over the pages of a
// file already at its temporary name, every byte of it up to the reserve written anew (spare
// pages, spare_pages.hpp), stored past the CPU's cache (kOverSpare: a stage, beside the training
// whose cache it spares) or written through the file (kRestoreOverSpare: a round's restore, with
// nothing beside it: 240 MiB fetched over pages allocated beforehand in 0.130 s written, 0.251 s
// stored through a mapping, scripts/bench/peer_fetch.sh); or the room only checked to be free at
// the start and taken as the bytes are written (kAsWritten: a fetch for a round's restore, which
// the budget does not bound).
enum class FileRoom { kReserved, kOverSpare, kRestoreOverSpare, kAsWritten };

// A file of the region layout written as its bytes arrive: made under `tmp` with `reserve` bytes
// reserved first (so that a full /dev/shm fails here, never as a SIGBUS later; `room`), the
// kRegionHeader bytes of `header` at its start and the payload after them, summed as it comes (by
// `arriving`, the kind of checksum its source has, and by its CRC); renamed to `path` only once
// complete and matching the checksum, with its CRC as the file's checksum. Removed unless
// committed.
class SlotFileWriter {
 public:
  // Throws std::system_error; where there is no room, its message names `what` and the size.
  SlotFileWriter(std::filesystem::path path, std::filesystem::path tmp, const std::string& header,
                 uint64_t reserve, const std::string& what,
                 PayloadSumKind arriving = PayloadSumKind::kCrc32,
                 FileRoom room = FileRoom::kReserved);
  SlotFileWriter(const SlotFileWriter&) = delete;
  SlotFileWriter& operator=(const SlotFileWriter&) = delete;

  // From now on, the payload's digest (payload_digest.hpp) is summed as it comes too, and
  // written into the file's header at commit. Before the first append.
  void record_digest();
  // The next `n` payload bytes (whole 8-byte words, except at the end). Over a spare's pages
  // (kOverSpare: written before, and reserved) stored into them, mapped once, past the cache
  // (cold_copy.hpp); else written to the file (fresh pages, or pages only allocated: a mapping
  // would have the kernel zero each first, which a write of whole pages does not; 240 MiB cost
  // 0.117 s of CPU mapped against 0.066 s written, docs/performance.md).
  void append(const char* p, size_t n);
  // The same, read from `in` at `at` (named `in_name`) into `scratch` (at least `n` bytes: small
  // enough to stay in the cache while they are summed and stored).
  void append_from(int in, uint64_t at, size_t n, const std::filesystem::path& in_name,
                   char* scratch);
  uint64_t written() const { return written_; }
  // Renames the file into place if its payload sums to `checksum` (of the arriving kind); false
  // (the file removed) if not.
  bool commit(uint64_t checksum);
  // Ends the writing without a commit and leaves the file under `tmp` to the caller (not removed,
  // its bytes partial): its path.
  std::filesystem::path release();
  // Whether append stores into the file's mapped pages (false but over a spare's pages, or where
  // the file could not be mapped; bytes past the reserve are written even so).
  bool stores_into_pages() const { return pages_ && pages_->get() != nullptr; }

 private:
  void sum(const char* p, size_t n);

  std::filesystem::path path_;
  Partial partial_;
  Fd fd_;
  uint64_t written_ = 0;
  std::optional<Mapping> pages_;  // over a spare's pages: the whole reserve
  PayloadSum crc_;
  std::optional<PayloadSum> arriving_;  // where the source's checksum is not a CRC
  std::unique_ptr<DigestSum> digest_;   // record_digest()
};

// Appends to a SlotFileWriter on a thread of its own, one chunk behind its caller, so that the
// next chunk arrives while this one is written and summed. Never more than two chunks held.
class AppendBehind {
 public:
  // Chunks of at most `chunk` bytes; `out` outlives it.
  AppendBehind(SlotFileWriter& out, size_t chunk);
  ~AppendBehind();  // waits for the chunk being appended
  AppendBehind(const AppendBehind&) = delete;
  AppendBehind& operator=(const AppendBehind&) = delete;

  // The buffer to fill with the next chunk: not touched by the thread until append().
  char* buffer() { return buffers_[next_].data(); }
  // The first `n` bytes of buffer() appended after the chunk before them, which this waits for;
  // rethrows what appending an earlier chunk threw.
  void append(size_t n);
  // Waits until every chunk is appended; rethrows what appending one threw.
  void finish();

 private:
  void run();
  void wait_idle(std::unique_lock<std::mutex>& lock);

  SlotFileWriter& out_;
  std::array<std::string, 2> buffers_;
  int next_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<std::pair<int, size_t>> job_;  // (buffer, bytes) handed and not yet appended
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace ddprun::agent
