// What the agent reads of the in-memory checkpoints: the steps a region's header says are
// committed, and the step every rank of a round holds; what --checkpoint_dir's persister writes and
// reads back, on real files with its real thread.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <spdlog/details/os.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>

#include "checkpoint/memory_use.hpp"
#include "checkpoint/persister.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/regions.hpp"
#include "checkpoint/slot_copy.hpp"
#include "checkpoint/spare_pages.hpp"
#include "exchanges/checkpoint_agreement.hpp"
#include "golden_region.hpp"

using namespace ddprun::agent;

namespace {

// A region header as ddprun/checkpoint.py writes it: two slot records of (state, step, size,
// checksum, sequence, structure size).
std::string header(uint64_t state0, int64_t step0, uint64_t seq0, uint64_t state1, int64_t step1,
                   uint64_t seq1) {
  std::string h(4096, '\0');
  std::memcpy(h.data(), "DDPCKPT1", 8);
  const auto put = [&h](size_t at, uint64_t v) { std::memcpy(h.data() + at, &v, sizeof v); };
  put(64, state0);
  put(72, static_cast<uint64_t>(step0));
  put(96, seq0);
  put(128, state1);
  put(136, static_cast<uint64_t>(step1));
  put(160, seq1);
  return h;
}

}  // namespace

TEST_CASE("checkpoint regions: committed steps come oldest first, others not at all",
          "[checkpoint]") {
  CHECK(CheckpointRegions::committed_steps(header(2, 8, 5, 2, 7, 4)) == std::vector<int64_t>{7, 8});
  // A slot being written (1) or empty (0) holds nothing that counts.
  CHECK(CheckpointRegions::committed_steps(header(2, 8, 5, 1, 9, 0)) == std::vector<int64_t>{8});
  CHECK(CheckpointRegions::committed_steps(header(0, 0, 0, 0, 0, 0)).empty());
  std::string torn = header(2, 8, 5, 2, 7, 4);
  torn[0] = 'X';  // not a region
  CHECK(CheckpointRegions::committed_steps(torn).empty());
  CHECK(CheckpointRegions::committed_steps("DDPCKPT1").empty());  // too short
}

TEST_CASE("checkpoint regions: a step saved twice is the newer save's slot", "[checkpoint]") {
  const std::optional<RegionHeader> twice = parse_region_header(header(2, 8, 7, 2, 8, 6));
  REQUIRE(twice);
  CHECK(twice->slot_of(8) == 0);  // sequence 7, against slot 1's 6
  const std::optional<RegionHeader> swapped = parse_region_header(header(2, 8, 6, 2, 8, 7));
  REQUIRE(swapped);
  CHECK(swapped->slot_of(8) == 1);
  CHECK(swapped->slot_of(9) == -1);
}

TEST_CASE("checkpoint agreement: the newest step held by every rank of every node",
          "[checkpoint]") {
  using checkpoint_agreement::newest_common;
  CHECK(newest_common({"[[4,5],[5,6]]", "[[5,6],[5,6]]"}, 2) == 5);
  CHECK(newest_common({"[[6,7],[6,7]]"}, 1) == 7);
  CHECK_FALSE(newest_common({"[[4,5],[6,7]]"}, 1).has_value());  // nothing in common
  CHECK_FALSE(newest_common({"[[5,6],[]]"}, 1).has_value());     // a rank without a checkpoint
  CHECK_FALSE(newest_common({"[[5,6]]"}, 2).has_value());        // a node did not say
  CHECK_FALSE(newest_common({"[[5,6]]", "not json"}, 2).has_value());
  CHECK_FALSE(newest_common({"[]"}, 1).has_value());
}

TEST_CASE("checkpoint persister: the first step every rank holds in each span", "[checkpoint]") {
  CHECK(step_to_persist({{0, 1}, {0, 1}}, std::nullopt, 4) == 0);
  CHECK(step_to_persist({{2, 3}, {3, 4}}, std::nullopt, 4) == 3);    // only 3 is held by both
  CHECK_FALSE(step_to_persist({{1, 2}, {1, 2}}, 0, 4).has_value());  // still the span of 0
  CHECK(step_to_persist({{3, 4}, {3, 4}}, 0, 4) == 4);
  CHECK(step_to_persist({{9, 10}, {9, 10}}, 4, 4) == 9);  // the span of 8 began with 9 here
  CHECK(step_to_persist({{5, 6}}, 4, 1) == 5);            // every step: the oldest newer one
  CHECK_FALSE(step_to_persist({{5, 6}, {}}, std::nullopt, 1).has_value());  // a rank holds none
  CHECK_FALSE(step_to_persist({}, std::nullopt, 1).has_value());
  CHECK(step_to_persist({{-3, -2}}, std::nullopt, 2) == -3);  // steps below zero have spans too
  CHECK(step_to_persist({{-2, -1}}, -3, 2) == -2);
}

namespace {

namespace fs = std::filesystem;

// A region whose slot 1 holds global rank 3's `payload` committed as `step` (checksum `checksum`,
// or its own).
void write_region(const fs::path& file, int64_t step, const std::string& payload,
                  std::optional<uint64_t> checksum = std::nullopt) {
  constexpr uint64_t kSlot = 16384;
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.step = step;
  rec.size = payload.size();
  rec.checksum = checksum.value_or(payload_crc(payload));
  rec.sequence = 9;
  rec.world_size = 4;
  rec.rank = 3;
  std::string region = region_header_for(rec, kSlot, 1234);
  region.replace(128, 64, region.substr(64, 64));  // slot 1's record
  region.replace(200, 8, region.substr(192, 8));   // its rank
  region.replace(64, 64, std::string(64, '\0'));
  region.replace(264, 8, region.substr(256, 8));  // slot 1's save time
  region.resize(kRegionHeader + 2 * kSlot, '\0');
  region.replace(kRegionHeader + kSlot, payload.size(), payload);
  std::ofstream(file, std::ios::binary) << region;
}

// `n` bytes, byte i being i * `step` + `start` (mod 256).
std::string bytes_stepping(size_t n, size_t step, size_t start) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i * step + start);
  return out;
}

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A folder of a test's own for the regions and the persisted files, removed when it ends.
struct Scratch {
  explicit Scratch(const std::string& name)
      : base(fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))),
        regions(base / "regions"),
        dir(base / "dir") {
    fs::remove_all(base);
    fs::create_directories(regions);
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(base, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const fs::path base, regions, dir;
};

// Runs `io` until `done` holds (at most 20 s).
template <typename Done>
bool run_until(boost::asio::io_context& io, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.run_for(std::chrono::milliseconds(20));
    io.restart();
  }
  return done();
}

// The default logger's lines in `pattern`, for as long as it lives.
class LogCapture {
 public:
  explicit LogCapture(const std::string& pattern) : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>(
        "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_pattern(pattern);
    spdlog::set_default_logger(std::move(logger));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace

TEST_CASE(
    "checkpoint persister: a committed slot goes to disk verbatim and comes back into a "
    "region, and a copy that does not match its checksum is dropped",
    "[checkpoint]") {
  const Scratch scratch("persister-test");
  const fs::path &regions = scratch.regions, &dir = scratch.dir;
  std::string payload = bytes_stepping(10000, 7, 3);
  write_region(regions / "rank0", 5, payload);

  boost::asio::io_context io;
  std::vector<PersistReport> reports;
  {
    CheckpointPersister persister(io, regions, dir, 1, std::nullopt, std::nullopt,
                                  [&reports](const PersistReport& r) { reports.push_back(r); });
    persister.watch({{0, 3}});  // local rank 0 is global rank 3
    REQUIRE(run_until(io, [&] { return !reports.empty(); }));
    REQUIRE(reports[0].kind == PersistReport::Kind::kPersisted);
    CHECK(reports[0].step == 5);
    CHECK(reports[0].rank == 3);
    CHECK(reports[0].bytes == payload.size());
    const std::string file = bytes_of(dir / "step_5" / "rank_3.ddpckpt");
    REQUIRE(file.size() == kRegionHeader + payload.size());
    CHECK(file.substr(kRegionHeader) == payload);
    const std::optional<RegionHeader> h = parse_region_header(file);
    REQUIRE(h);
    CHECK(h->slot_of(5) == 0);
    CHECK(h->slots[0].world_size == 4);
    CHECK(h->save_micros[0] == 1234);
    CHECK(persister.steps_on_disk(3, 4) == std::vector<int64_t>{5});
    CHECK(persister.steps_on_disk(3, 8).empty());  // another world size
    CHECK(persister.steps_on_disk(2, 4).empty());  // another rank

    // Read back into a region that is gone (a job started from nothing).
    fs::remove(regions / "rank0");
    bool restored = false, finished = false;
    boost::asio::co_spawn(io, persister.restore(5, {{0, 3}}), [&](std::exception_ptr, bool ok) {
      restored = ok;
      finished = true;
    });
    REQUIRE(run_until(io, [&] { return finished; }));
    CHECK(restored);
    const std::string region = bytes_of(regions / "rank0");
    const std::optional<RegionHeader> back = parse_region_header(region);
    REQUIRE(back);
    CHECK(back->slot_of(5) == 0);
    CHECK(region.size() == kRegionHeader + 2 * back->slot_size);
    CHECK(region.substr(kRegionHeader, payload.size()) == payload);

    // A slot whose bytes do not sum to its checksum (the worker reused it during the copy) is
    // dropped, nothing written; a step not on disk cannot be read back.
    write_region(regions / "rank0", 6, payload, 42);
    reports.clear();
    persister.persist_newest();
    REQUIRE(run_until(io, [&] { return !reports.empty(); }));
    CHECK(reports[0].kind == PersistReport::Kind::kDropped);
    CHECK(reports[0].detail == "the worker reused the slot during the copy");
    CHECK_FALSE(fs::exists(dir / "step_6"));
    finished = false;
    boost::asio::co_spawn(io, persister.restore(7, {{0, 3}}), [&](std::exception_ptr, bool ok) {
      restored = ok;
      finished = true;
    });
    REQUIRE(run_until(io, [&] { return finished; }));
    CHECK_FALSE(restored);
    CHECK(reports.back().kind == PersistReport::Kind::kFailed);
  }
}

TEST_CASE(
    "checkpoint persister: short of room in the node's budget, a copy's stage in memory takes the "
    "pages of dropped copies held for the next one, where they make the room",
    "[checkpoint]") {
  const Scratch scratch("persister-spares");
  const fs::path &regions = scratch.regions, &dir = scratch.dir;
  std::string payload = bytes_stepping(10000, 5, 1);
  write_region(regions / "rank0", 5, payload);
  const fs::path spares = spares_of(regions / "kept");
  fs::create_directories(spares);
  std::ofstream(spares / "0", std::ios::binary) << std::string(64 << 10, 's');
  const uint64_t without_spares = checkpoint_memory(regions).total() - (64 << 10);
  const std::atomic<bool> stop{false};
  // No room for the stage even without them: they stay (the copy goes straight from the slot).
  const PersistReport straight =
      copy_to_disk(regions, 0, 5, dir, 3, stop, std::nullopt,
                   without_spares + allocated_for(payload.size()) - 4096);
  INFO(straight.detail);
  CHECK(straight.kind == PersistReport::Kind::kPersisted);
  CHECK(fs::exists(spares / "0"));
  fs::remove_all(dir);
  // Room for it once they are given back: they go.
  const PersistReport r = copy_to_disk(regions, 0, 5, dir, 3, stop, std::nullopt,
                                       without_spares + allocated_for(payload.size()));
  INFO(r.detail);
  CHECK(r.kind == PersistReport::Kind::kPersisted);
  CHECK(fs::is_empty(spares));
  CHECK(bytes_of(dir / "step_5" / "rank_3.ddpckpt").substr(kRegionHeader) == payload);
}

TEST_CASE(
    "checkpoint persister: after a restore, later steps on disk are set aside for this node's "
    "ranks, and a step of another timeline on disk is replaced, not kept",
    "[checkpoint]") {
  const Scratch scratch("persister-abandon");
  const fs::path &regions = scratch.regions, &dir = scratch.dir;
  const std::string old_bytes(8192, 'o'), new_bytes(8192, 'n');
  // The warning that names the steps set aside, with the thread that said it.
  const LogCapture log("%t %v");
  boost::asio::io_context io;
  std::vector<PersistReport> reports;
  {
    CheckpointPersister persister(io, regions, dir, 1, std::nullopt, std::nullopt,
                                  [&reports](const PersistReport& r) { reports.push_back(r); });
    persister.watch({{0, 3}});
    for (int64_t step : {5, 6}) {  // the old timeline's steps 5 and 6 on disk
      write_region(regions / "rank0", step, old_bytes);
      reports.clear();
      persister.persist_newest();
      REQUIRE(run_until(io, [&] { return !reports.empty(); }));
      REQUIRE(reports[0].kind == PersistReport::Kind::kPersisted);
    }
    fs::create_directories(dir / "step_6");
    std::ofstream(dir / "step_6" / "rank_1.ddpckpt") << "another node's rank";
    // The round restores step 5 at world size 4: step 6 of global rank 3 goes aside, another
    // rank's stays; one of another world size (a relaunch at another size) is left alone.
    persister.abandon_after(5, 8, {3});
    write_region(regions / "rank0", 7, old_bytes);  // a copy queued behind it: once reported,
    reports.clear();                                // the abandonment before it has run
    persister.persist_newest();
    REQUIRE(run_until(io, [&] { return !reports.empty(); }));
    CHECK(persister.steps_on_disk(3, 4) == std::vector<int64_t>{5, 6, 7});
    persister.abandon_after(5, 4, {3});
    CHECK(run_until(io, [&] { return persister.steps_on_disk(3, 4).size() == 1; }));
    CHECK(persister.steps_on_disk(3, 4) == std::vector<int64_t>{5});
    CHECK(fs::exists(dir / "step_6" / ".rank_3.ddpckpt.abandoned"));
    CHECK(fs::exists(dir / "step_7" / ".rank_3.ddpckpt.abandoned"));
    CHECK(fs::exists(dir / "step_6" / "rank_1.ddpckpt"));
    // Said on the thread that runs the io_context (the persister's own may outlive the logger).
    CHECK(run_until(io,
                    [&] { return log.text().find("timeline the job left") != std::string::npos; }));
    const std::string said = log.text();
    INFO(said);
    CHECK(said.find(fmt::format("{} checkpoint: global rank 3's files of steps 6, 7 in ",
                                spdlog::details::os::thread_id())) != std::string::npos);
    // The new timeline's step 5 (other bytes) replaces the old one's.
    write_region(regions / "rank0", 5, new_bytes);
    reports.clear();
    persister.persist_newest();
    REQUIRE(run_until(io, [&] { return !reports.empty(); }));
    CHECK(reports[0].kind == PersistReport::Kind::kPersisted);
    CHECK(bytes_of(dir / "step_5" / "rank_3.ddpckpt").substr(kRegionHeader) == new_bytes);
  }
}

TEST_CASE(
    "checkpoint persister: after a restore the new timeline's next step is persisted, though the "
    "old one had persisted later steps",
    "[checkpoint]") {
  const Scratch scratch("persister-timeline");
  const fs::path &regions = scratch.regions, &dir = scratch.dir;
  const std::string old_bytes(8192, 'o'), new_bytes(8192, 'n');
  boost::asio::io_context io;
  std::vector<PersistReport> reports;
  {
    CheckpointPersister persister(io, regions, dir, 1, std::nullopt, std::nullopt,
                                  [&reports](const PersistReport& r) { reports.push_back(r); });
    persister.watch({{0, 3}});
    for (int64_t step : {5, 6, 7}) {  // the old timeline persisted up to step 7
      write_region(regions / "rank0", step, old_bytes);
      REQUIRE(run_until(io, [&] {
        return persister.steps_on_disk(3, 4).size() == static_cast<size_t>(step - 4);
      }));
    }
    // The round restores step 5: the new timeline saves step 6 again, and it reaches the disk.
    persister.abandon_after(5, 4, {3});
    write_region(regions / "rank0", 6, new_bytes);
    REQUIRE(run_until(io, [&] {
      return persister.steps_on_disk(3, 4) == std::vector<int64_t>{5, 6} &&
             bytes_of(dir / "step_6" / "rank_3.ddpckpt").substr(kRegionHeader) == new_bytes;
    }));
    CHECK(fs::exists(dir / "step_7" / ".rank_3.ddpckpt.abandoned"));
    // A round that restores nothing (afresh): every step of this rank goes aside, so that the new
    // timeline never completes a step beside the old one's files.
    // (The region still holds step 6: it is persisted again, as the new timeline's first.)
    persister.abandon_after(-1, 4, {3});
    CHECK(run_until(io, [&] { return fs::exists(dir / "step_5" / ".rank_3.ddpckpt.abandoned"); }));
    CHECK_FALSE(fs::exists(dir / "step_5" / "rank_3.ddpckpt"));
  }
}

TEST_CASE(
    "checkpoint persister: two swapped words fail a slot's CRC, and a file of the layout before "
    "is checked by its word sum and comes back with its CRC",
    "[checkpoint]") {
  std::string payload = bytes_stepping(4096, 13, 1);
  std::string swapped = payload;
  swapped.replace(0, 8, payload.substr(64, 8));
  swapped.replace(64, 8, payload.substr(0, 8));
  REQUIRE(swapped != payload);
  PayloadSum words(PayloadSumKind::kWordSum), words_swapped(PayloadSumKind::kWordSum);
  words.add(payload.data(), payload.size());
  words_swapped.add(swapped.data(), swapped.size());
  CHECK(words.value() == words_swapped.value());  // what the sum of words could not see
  CHECK(payload_crc(payload) != payload_crc(swapped));
  PayloadSum pieces;  // a CRC summed in pieces of any size is the whole's
  pieces.add(payload.data(), 5);
  pieces.add(payload.data() + 5, payload.size() - 5);
  CHECK(pieces.value() == payload_crc(payload));

  const Scratch scratch("crc-test");
  const fs::path &regions = scratch.regions, &dir = scratch.dir;
  fs::create_directories(dir / "step_8");
  fs::create_directories(dir / "step_9");
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.size = payload.size();
  rec.sequence = 1;
  rec.world_size = 4;
  rec.rank = 3;
  // Step 8: a file of the layout before, its checksum the sum of its words.
  rec.step = 8;
  rec.checksum = words.value();
  std::string old_file = region_header_for(rec, payload.size(), 0) + payload;
  old_file.replace(0, 8, "DDPCKPT2");
  std::ofstream(dir / "step_8" / "rank_3.ddpckpt", std::ios::binary) << old_file;
  // Step 9: the current layout with two words swapped after its CRC was taken.
  rec.step = 9;
  rec.checksum = payload_crc(payload);
  std::ofstream(dir / "step_9" / "rank_3.ddpckpt", std::ios::binary)
      << region_header_for(rec, payload.size(), 0) + swapped;

  boost::asio::io_context io;
  std::vector<PersistReport> reports;
  {
    CheckpointPersister persister(io, regions, dir, 1, std::nullopt, std::nullopt,
                                  [&reports](const PersistReport& r) { reports.push_back(r); });
    const auto restore = [&](int64_t step) {
      bool ok = false, finished = false;
      boost::asio::co_spawn(io, persister.restore(step, {{0, 3}}), [&](std::exception_ptr, bool r) {
        ok = r;
        finished = true;
      });
      REQUIRE(run_until(io, [&] { return finished; }));
      return ok;
    };
    CHECK_FALSE(restore(9));
    REQUIRE_FALSE(reports.empty());
    CHECK(reports.back().kind == PersistReport::Kind::kFailed);
    CHECK(reports.back().detail.find("fails its checksum") != std::string::npos);
    CHECK(restore(8));
    const std::string region = bytes_of(regions / "rank0");
    CHECK(region.substr(0, 8) == "DDPCKPT3");
    const std::optional<RegionHeader> back = parse_region_header(region);
    REQUIRE(back);
    REQUIRE(back->slot_of(8) == 0);
    CHECK(back->slots[0].sum_kind == PayloadSumKind::kCrc32);
    CHECK(back->slots[0].checksum == payload_crc(payload));
    CHECK(region.substr(kRegionHeader, payload.size()) == payload);
  }
}

TEST_CASE(
    "checkpoint persister: with the job's token a file carries its MAC, and one without it, "
    "altered with its CRC made to match, or of another token is not read back",
    "[checkpoint]") {
  const Scratch scratch("mac-test");
  const fs::path &regions = scratch.regions, &dir = scratch.dir;
  std::string payload = bytes_stepping(20000, 5, 2);
  const ddprun::store::Token token("0123456789abcdef-job"), other("0123456789abcdef-other");
  boost::asio::io_context io;
  std::vector<PersistReport> reports;
  const auto persist = [&](std::optional<ddprun::store::Token> t, int64_t step) {
    write_region(regions / "rank0", step, payload);
    CheckpointPersister persister(io, regions, dir, 1, std::move(t), std::nullopt,
                                  [&reports](const PersistReport& r) { reports.push_back(r); });
    reports.clear();
    persister.watch({{0, 3}});
    REQUIRE(run_until(io, [&] { return !reports.empty(); }));
    REQUIRE(reports[0].kind == PersistReport::Kind::kPersisted);
  };
  const auto restore = [&](std::optional<ddprun::store::Token> t, int64_t step) {
    fs::remove(regions / "rank0");
    CheckpointPersister persister(io, regions, dir, 1, std::move(t), std::nullopt,
                                  [&reports](const PersistReport& r) { reports.push_back(r); });
    reports.clear();
    bool ok = false, finished = false;
    boost::asio::co_spawn(io, persister.restore(step, {{0, 3}}), [&](std::exception_ptr, bool r) {
      ok = r;
      finished = true;
    });
    REQUIRE(run_until(io, [&] { return finished; }));
    return ok ? std::string() : reports.empty() ? std::string("?") : reports.back().detail;
  };
  const auto file_of = [&](int64_t step) {
    return dir / ("step_" + std::to_string(step)) / "rank_3.ddpckpt";
  };
  persist(token, 5);
  const std::string signed_file = bytes_of(file_of(5));
  CHECK(signed_file.substr(kSlot0MacAt, 32) != std::string(32, '\0'));
  CHECK(restore(token, 5).empty());
  CHECK(bytes_of(regions / "rank0").substr(kRegionHeader, payload.size()) == payload);
  CHECK(restore(std::nullopt, 5).empty());  // a job without the token checks the CRC only
  CHECK_THAT(restore(other, 5), Catch::Contains("fails its MAC"));
  // Altered, with the header's CRC made to match the new bytes: the MAC tells.
  std::string altered = signed_file;
  altered[kRegionHeader + 100] ^= 1;
  const uint64_t crc = payload_crc(altered.substr(kRegionHeader));
  altered.replace(kSlot0ChecksumAt, 8, std::string(reinterpret_cast<const char*>(&crc), 8));
  std::ofstream(file_of(5), std::ios::binary | std::ios::trunc) << altered;
  CHECK_THAT(restore(token, 5), Catch::Contains("fails its MAC"));
  CHECK(restore(std::nullopt, 5).empty());  // (what a CRC alone cannot tell)
  // Written by a job without a token: no MAC, refused by one with a token.
  persist(std::nullopt, 6);
  CHECK(bytes_of(file_of(6)).substr(kSlot0MacAt, 32) == std::string(32, '\0'));
  CHECK_THAT(restore(token, 6), Catch::Contains("has no MAC"));
  CHECK_FALSE(fs::exists(regions / "rank0"));  // nothing was put in place
}

TEST_CASE(
    "checkpoint regions: the golden region is read field by field and a slot file's header "
    "is written as it lays out",
    "[checkpoint]") {
  const ddprun::test::GoldenRegion g = ddprun::test::read_golden_region();
  const std::optional<RegionHeader> h = parse_region_header(g.bytes);
  REQUIRE(h);
  CHECK(h->slot_size == g.word("slot_size"));
  for (int i = 0; i < 2; ++i) {
    const std::string s = "slot" + std::to_string(i) + ".";
    const SlotRecord& r = h->slots[i];
    ddprun::test::check_record(g, i, r);
    CHECK(r.rank == g.signed_word(s + "rank"));
    CHECK(r.run_tag == g.word(s + "run_tag"));
    CHECK(r.sum_kind == PayloadSumKind::kCrc32);
    CHECK(h->save_micros[i] == g.word(s + "save_micros"));
    CHECK(r.state_digest == g.word(s + "state_digest"));
    CHECK(r.state_identity() == r.state_digest);
    CHECK(payload_crc(g.text(s + "payload")) == r.checksum);
  }
  CHECK(run_tag_of("golden-run") == g.word("slot0.run_tag"));
  CHECK(h->committed_steps() == std::vector<int64_t>{7, 8});

  // A file holding slot 0 alone: the golden header with slot 1's words zero.
  std::string expected = g.bytes.substr(0, kRegionHeader);
  for (const size_t at : {size_t{200}, size_t{216}, size_t{264}, size_t{336}}) {
    std::memset(expected.data() + at, 0, 8);
  }
  std::memset(expected.data() + slot_record_at(1), 0, 64);
  CHECK(region_header_for(h->slots[0], g.word("slot_size"), g.word("slot0.save_micros")) ==
        expected);
}

TEST_CASE(
    "checkpoint regions: the metrics name each worker's own local rank, one task's under "
    "srun or mpirun",
    "[checkpoint]") {
  const CheckpointRegions regions("metrics-test-" + std::to_string(::getpid()));
  write_region(fs::path(regions.path()) / "rank3", 5, bytes_stepping(100, 1, 0));
  const std::string text = regions.metrics({3});
  CHECK(text.find("ddprun_checkpoint_step{local_rank=\"3\"} 5") != std::string::npos);
  CHECK(text.find("local_rank=\"0\"") == std::string::npos);
  CHECK(regions.metrics({0}).find("ddprun_checkpoint_step{local_rank=\"0\"} -1") !=
        std::string::npos);
}
