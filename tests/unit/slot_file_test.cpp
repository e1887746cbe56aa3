// A slot's file written as its bytes arrive (SlotFileWriter, AppendBehind) or copied out of a
// region, and a round's restore putting a fetched file in place as a region (move_back), on real
// files.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <system_error>

#include <catch2/catch.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "checkpoint/file_io.hpp"
#include "checkpoint/payload_digest.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/slot_copy.hpp"
#include "checkpoint/slot_file.hpp"
#include "stat_of.hpp"
#include "temp_folder.hpp"

using namespace ddprun::agent;
namespace fs = std::filesystem;
using ddprun::test::stat_of;

namespace {

struct Scratch : ddprun::test::TempFolder {
  explicit Scratch(const std::string& name)
      : TempFolder(name), regions(path / "regions"), restore(path / "restore") {
    fs::create_directories(regions);
    fs::create_directories(restore / "step_5");
  }
  const fs::path regions, restore;
};

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Bytes that differ from one offset to the next (a chunk out of place changes them).
std::string pattern(size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
  return out;
}

// Global rank 3's step 5 of `payload`, as a restore's fetch leaves it in `file`.
void fetched_file(const fs::path& file, const std::string& payload) {
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.step = 5;
  rec.size = payload.size();
  rec.checksum = payload_crc(payload);
  rec.sequence = 4;
  rec.world_size = 4;
  rec.rank = 3;
  SlotFileWriter out(file, file.parent_path() / ".rank_3.tmp",
                     region_header_for(rec, file_slot_size(rec.size), 77), kRegionHeader + rec.size,
                     "global rank 3's checkpoint", PayloadSumKind::kCrc32, FileRoom::kAsWritten);
  out.record_digest();  // (as a kept copy's: a region's header has no digest)
  AppendBehind behind(out, 1 << 20);
  for (size_t done = 0; done < payload.size();) {
    const size_t n = std::min<size_t>(1 << 20, payload.size() - done);
    payload.copy(behind.buffer(), n, done);
    behind.append(n);
    done += n;
  }
  behind.finish();
  REQUIRE(out.commit(rec.checksum));
}

}  // namespace

TEST_CASE(
    "slot files: a fetched file becomes its rank's region without a copy, the second slot "
    "reserved",
    "[checkpoint]") {
  const Scratch scratch("slot-file-move");
  const fs::path file = scratch.restore / "step_5" / "rank_3.ddpckpt";
  const std::string payload = pattern((3 << 20) + 808);  // ends inside a page
  fetched_file(file, payload);
  const ino_t inode = stat_of(file).st_ino;

  REQUIRE(digest_in(bytes_of(file)));
  REQUIRE(move_back(scratch.restore, 5, 3, scratch.regions, 0));
  CHECK_FALSE(fs::exists(file));
  const fs::path region = scratch.regions / "rank0";
  const struct stat st = stat_of(region);
  CHECK(st.st_ino == inode);  // the same file: nothing was copied
  const std::string bytes = bytes_of(region);
  const std::optional<RegionHeader> h = parse_region_header(bytes);
  REQUIRE(h);
  CHECK(h->slot_size == file_slot_size(payload.size()));
  CHECK(h->slot_of(5) == 0);
  CHECK(h->slot_of(6) == -1);
  CHECK(h->slots[0].rank == 3);
  CHECK(h->slots[0].world_size == 4);
  CHECK(h->slots[0].checksum == payload_crc(payload));
  CHECK(h->save_micros[0] == 77);
  CHECK_FALSE(digest_in(bytes));  // a region's header, written anew
  // Two whole slots, every page of them backed (a worker's save through its mapping cannot fault
  // for want of memory), and the payload as it came.
  REQUIRE(static_cast<uint64_t>(st.st_size) == kRegionHeader + 2 * h->slot_size);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 >= kRegionHeader + 2 * h->slot_size);
  CHECK(bytes.compare(kRegionHeader, payload.size(), payload) == 0);
}

TEST_CASE("slot files: a fetched step of no bytes becomes a region too", "[checkpoint]") {
  const Scratch scratch("slot-file-empty");
  fetched_file(scratch.restore / "step_5" / "rank_3.ddpckpt", "");
  REQUIRE(move_back(scratch.restore, 5, 3, scratch.regions, 0));
  const std::optional<RegionHeader> h = parse_region_header(bytes_of(scratch.regions / "rank0"));
  REQUIRE(h);
  CHECK(h->slot_of(5) == 0);
  CHECK(h->slots[0].size == 0);
}

TEST_CASE(
    "slot files: a fetched file another name links to, or of another rank, is left for a copy",
    "[checkpoint]") {
  const Scratch scratch("slot-file-linked");
  const fs::path file = scratch.restore / "step_5" / "rank_3.ddpckpt";
  const std::string payload = pattern(100000);
  fetched_file(file, payload);
  const std::string before = bytes_of(file);

  // Files named for another rank and step that hold rank 3's step 5.
  fs::copy_file(file, scratch.restore / "step_5" / "rank_2.ddpckpt");
  CHECK_FALSE(move_back(scratch.restore, 5, 2, scratch.regions, 0));
  fs::create_directories(scratch.restore / "step_6");
  fs::copy_file(file, scratch.restore / "step_6" / "rank_3.ddpckpt");
  CHECK_FALSE(move_back(scratch.restore, 6, 3, scratch.regions, 0));
  CHECK_THROWS_AS(move_back(scratch.restore, 5, 1, scratch.regions, 0), std::system_error);
  fs::create_hard_link(file, scratch.path / "kept");  // a copy kept under another name
  CHECK_FALSE(move_back(scratch.restore, 5, 3, scratch.regions, 0));
  CHECK_FALSE(fs::exists(scratch.regions / "rank0"));
  CHECK(bytes_of(file) == before);
  CHECK(bytes_of(scratch.path / "kept") == before);
}

TEST_CASE("slot files: a write that fails behind the receiver is raised to it, no file kept",
          "[checkpoint]") {
  const Scratch scratch("slot-file-fails");
  const fs::path file = scratch.restore / "step_5" / "rank_3.ddpckpt";
  // Files may grow to 1 MiB here (the write past it fails with EFBIG, the signal ignored).
  struct Limit {
    rlimit was{};
    sighandler_t handler;
    Limit() : handler(::signal(SIGXFSZ, SIG_IGN)) {
      ::getrlimit(RLIMIT_FSIZE, &was);
      const rlimit one{1 << 20, was.rlim_max};
      ::setrlimit(RLIMIT_FSIZE, &one);
    }
    ~Limit() {
      ::setrlimit(RLIMIT_FSIZE, &was);
      ::signal(SIGXFSZ, handler);
    }
  };
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.step = 5;
  rec.size = 4 << 20;
  rec.rank = 3;
  const std::string chunk = pattern(256 << 10);
  {
    const Limit limit;
    SlotFileWriter out(file, file.parent_path() / ".rank_3.tmp",
                       region_header_for(rec, rec.size, 0), kRegionHeader + rec.size,
                       "global rank 3's checkpoint", PayloadSumKind::kCrc32, FileRoom::kAsWritten);
    const auto receive = [&] {
      AppendBehind behind(out, chunk.size());
      for (int i = 0; i < 16; ++i) {
        chunk.copy(behind.buffer(), chunk.size());
        behind.append(chunk.size());
      }
      behind.finish();
    };
    CHECK_THROWS_AS(receive(), std::system_error);
  }
  CHECK(fs::is_empty(scratch.restore / "step_5"));
}

TEST_CASE("slot files: a file the free space cannot hold is refused at once, naming it",
          "[checkpoint]") {
  const Scratch scratch("slot-file-room");
  const fs::path file = scratch.restore / "step_5" / "rank_3.ddpckpt";
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.step = 5;
  rec.size = uint64_t{1} << 60;
  rec.rank = 3;
  try {
    SlotFileWriter out(file, file.parent_path() / ".rank_3.tmp",
                       region_header_for(rec, rec.size, 0), kRegionHeader + rec.size,
                       "global rank 3's checkpoint", PayloadSumKind::kCrc32, FileRoom::kAsWritten);
    FAIL("a file of 1 EiB was begun");
  } catch (const std::system_error& e) {
    CHECK(e.code().value() == ENOSPC);
    CHECK_THAT(e.what(), Catch::Contains("global rank 3's checkpoint") &&
                             Catch::Contains(std::to_string(kRegionHeader + rec.size)));
  }
  CHECK(fs::is_empty(scratch.restore / "step_5"));
}

namespace {

// `payload` after a page of other bytes, in `file`: a region's slot as a source of copies.
void source_file(const fs::path& file, const std::string& payload) {
  std::ofstream out(file, std::ios::binary);
  out << std::string(4096, '\x5a') << payload;
}

// The payload of global rank 3's step 5 copied out of `source` (after its first page) into
// `file`, its room `room`, `piece` bytes at a time, its digest recorded; whether it committed, and
// (`into_pages`) whether it was stored into the file's mapped pages.
bool copied_file(const fs::path& source, const fs::path& file, size_t size, size_t piece,
                 FileRoom room = FileRoom::kReserved, bool* into_pages = nullptr) {
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.step = 5;
  rec.size = size;
  rec.rank = 3;
  SlotFileWriter out(file, file.parent_path() / ".rank_3.tmp",
                     region_header_for(rec, file_slot_size(size), 0), kRegionHeader + size,
                     "a copy of local rank 0's checkpoint", PayloadSumKind::kCrc32, room);
  out.record_digest();
  const Fd in(open_or_fail(source, O_RDONLY));
  std::string scratch(piece, '\0');
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(piece, size - done);
    out.append_from(in.fd, 4096 + done, n, source, scratch.data());
    done += n;
  }
  if (into_pages != nullptr) *into_pages = out.stores_into_pages();
  return out.commit(payload_crc(bytes_of(source).substr(4096, size)));
}

}  // namespace

TEST_CASE(
    "slot files: a slot copied out into the file's pages where its memory is reserved (fresh "
    "or a spare's), or through the buffer where it is taken as written, holds its bytes and "
    "their CRC and XXH3 digest",
    "[checkpoint]") {
  // Into a memory file system, as the agent's copies, from the same one and from the temporary
  // folder's (another, where it is a disk's).
  const ddprun::test::TempFolder shm("/dev/shm", "slot-file-copy");
  const ddprun::test::TempFolder other("slot-file-copy-src");
  const fs::path into = shm.path / "step_5";
  fs::create_directories(into);
  const std::string payload = pattern((3 << 20) + 808);
  for (const fs::path& source : {shm.path / "region", other.path / "region"}) {
    source_file(source, payload);
    for (const FileRoom room : {FileRoom::kReserved, FileRoom::kOverSpare, FileRoom::kAsWritten}) {
      CAPTURE(source, static_cast<int>(room));
      const fs::path file = into / "rank_3.ddpckpt";
      // (Pieces of 1000 bytes: whole words, but stores that begin off the 16 bytes' alignment.)
      for (const size_t piece : {size_t{1} << 20, size_t{1000}}) {
        CAPTURE(piece);
        if (room == FileRoom::kOverSpare) {  // a dropped copy's pages, longer, other bytes
          std::ofstream(into / ".rank_3.tmp", std::ios::binary)
              << std::string(kRegionHeader + payload.size() + (1 << 20), '\x77');
        }
        bool into_pages = false;
        REQUIRE(copied_file(source, file, payload.size(), piece, room, &into_pages));
        CHECK(into_pages == (room == FileRoom::kOverSpare));
        CHECK(fs::file_size(file) == kRegionHeader + payload.size());
        const std::string bytes = bytes_of(file);
        CHECK(bytes.compare(kRegionHeader, std::string::npos, payload) == 0);
        const std::optional<PayloadDigest> digest = digest_in(bytes);
        REQUIRE(digest);
        // (xxhash.h's one-shot XXH3, compiled here for any x86-64: the agent's may run AVX2.)
        const XXH128_hash_t theirs = XXH3_128bits(payload.data(), payload.size());
        CHECK(*digest == PayloadDigest{theirs.low64, theirs.high64});
        fs::remove(file);
      }
    }
  }
}

TEST_CASE("slot files: a source that ends before the slot's size fails its copy, naming it",
          "[checkpoint]") {
  const Scratch scratch("slot-file-short");
  const ddprun::test::TempFolder shm("/dev/shm", "slot-file-short-src");
  for (const fs::path& source : {scratch.path / "region", shm.path / "region"}) {
    CAPTURE(source);
    source_file(source, pattern(1 << 20));
    const fs::path file = scratch.restore / "step_5" / "rank_3.ddpckpt";
    CHECK_THROWS_WITH(copied_file(source, file, 2 << 20, 1 << 20),
                      Catch::Contains(source.string()));
    CHECK(fs::is_empty(scratch.restore / "step_5"));
  }
}

TEST_CASE("slot files: a spare short of the reserve, or with holes, has its missing pages reserved",
          "[checkpoint]") {
  const ddprun::test::TempFolder shm("/dev/shm", "slot-file-spare");  // as the agent's kept copies
  const fs::path tmp = shm.path / ".rank_3.tmp";
  const uint64_t reserve = kRegionHeader + (2 << 20);
  for (const uint64_t written : {uint64_t{4096}, uint64_t{0}}) {
    {
      std::ofstream out(tmp, std::ios::binary);
      out << std::string(written, 'x');
    }
    fs::resize_file(tmp, reserve / 2);  // the rest a hole
    SlotRecord rec;
    rec.state = SlotRecord::kCommitted;
    rec.step = 5;
    rec.size = 2 << 20;
    const SlotFileWriter out(shm.path / "rank_3.ddpckpt", tmp, region_header_for(rec, rec.size, 0),
                             reserve, "a copy", PayloadSumKind::kCrc32, FileRoom::kOverSpare);
    const struct stat st = stat_of(tmp);
    CHECK(static_cast<uint64_t>(st.st_size) == reserve);
    CHECK(static_cast<uint64_t>(st.st_blocks) * 512 >= reserve);
  }
}
