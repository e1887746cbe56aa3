// The memory a spare node holds for a restore (checkpoint/restore_room.hpp): what the nodes say,
// what a spare makes of it, and what it holds within the node's budget.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "checkpoint/memory_use.hpp"
#include "checkpoint/restore_room.hpp"
#include "checkpoint/spare_pages.hpp"
#include "temp_folder.hpp"

using namespace ddprun::agent;
namespace fs = std::filesystem;
using Sizes = std::vector<uint64_t>;

namespace {

struct Regions : ddprun::test::TempFolder {
  Regions() : TempFolder("/dev/shm", "ddprun-room-test") {}
  fs::path spares() const { return spares_of(path / "kept"); }
  // Whatever the folder holds besides the spare files and the budget's lock (a file being made,
  // say).
  std::vector<fs::path> others() const {
    std::vector<fs::path> found;
    for (const auto& e : fs::recursive_directory_iterator(path)) {
      if (e.is_regular_file() && e.path().parent_path() != spares() &&
          e.path().filename() != ".budget") {
        found.push_back(e.path());
      }
    }
    return found;
  }
};

}  // namespace

TEST_CASE("restore room: what a node says reads back, and what is not a saying is refused",
          "[restore_room]") {
  CHECK(room_text({}).empty());
  CHECK(room_text({4096, 123}) == "4096 123");
  CHECK(room_from_text("") == Sizes{});
  CHECK(room_from_text("4096 123") == Sizes{4096, 123});
  CHECK(room_from_text(room_text({281474976710656ull})) == Sizes{281474976710656ull});  // 256 TiB
  for (const char* garbage : {" ", "1 ", " 1", "1  2", "x", "-1", "1,2", "12a", "281474976710657",
                              "18446744073709551615", "184467440737095516160"}) {
    INFO(garbage);
    CHECK_FALSE(room_from_text(garbage));
  }
  std::string many;
  for (int i = 0; i < 4097; ++i) many += (i == 0 ? "" : " ") + std::to_string(i);
  CHECK_FALSE(room_from_text(many));  // more files than a node has local ranks
}

TEST_CASE("restore room: a spare holds the files of the node whose checkpoints take the most",
          "[restore_room]") {
  CHECK(room_wanted({}).empty());
  CHECK(room_wanted({"", "not a saying"}).empty());
  // 4096 + 4096 bytes against 12288 (10000 in whole pages): the second node's.
  CHECK(room_wanted({"4096 4096", "10000", "99999999999 x"}) == Sizes{10000});
  CHECK(room_wanted({"10 20000"}) == Sizes{20000, 10});  // largest first
}

TEST_CASE(
    "restore room: a spare holds a file of each size asked for and nothing else, within the "
    "budget, those there kept first",
    "[restore_room]") {
  Regions r;
  fs::create_directories(r.spares());
  std::ofstream(r.spares() / "0", std::ios::binary)
      << std::string(64 << 10, 's');  // a dropped copy's
  std::ofstream(r.spares() / "1", std::ios::binary) << std::string(8 << 10, 's');  // another
  const std::atomic<bool> go{false};

  // 100000 bytes (102400 in pages) made; 50000 (53248) held by the 64 KiB spare there; the 8 KiB
  // one holds nothing asked for: dropped.
  RoomHeld held = hold_room(r.path, {50000, 100000}, uint64_t{1} << 20, go);
  CHECK(held.count == 2);
  CHECK(held.files == 2);
  CHECK(held.made == 1);
  CHECK(held.wanted == 102400 + 53248);
  CHECK(held.held == 102400 + 65536);
  CHECK_FALSE(held.short_by);
  CHECK(spare_sizes(r.spares()) == Sizes{102400, 65536});
  CHECK(checkpoint_memory(r.path).kept == 102400 + 65536);  // in the node's budget, as kept
  // Asked again: nothing more made.
  held = hold_room(r.path, {50000, 100000}, uint64_t{1} << 20, go);
  CHECK(held.made == 0);
  CHECK(held.files == 2);
  CHECK(spare_sizes(r.spares()) == Sizes{102400, 65536});
  // A size that grew past what its file holds: a file of the new size, the old one dropped (a
  // node's slots growing never piles files up).
  held = hold_room(r.path, {50000, 110000}, uint64_t{1} << 20, go);
  CHECK(held.made == 1);
  CHECK(spare_sizes(r.spares()) == Sizes{110592, 65536});

  // A file the budget cannot take is not made, and says why; what held nothing asked for went.
  held = hold_room(r.path, {8 << 20}, uint64_t{1} << 20, go);
  CHECK(held.files == 0);
  REQUIRE(held.short_by);
  CHECK_THAT(*held.short_by, Catch::Contains("its budget is 1048576 bytes"));
  CHECK_THAT(*held.short_by, Catch::Contains("a file of 8388608 bytes more does not fit"));
  CHECK(spare_sizes(r.spares()).empty());
  CHECK(r.others().empty());
  // Without a budget the file system bounds it, a twentieth of it left free: a file larger than
  // it is not begun.
  held = hold_room(r.path, {uint64_t{1} << 47}, std::nullopt, go);
  REQUIRE(held.short_by);
  CHECK_THAT(*held.short_by, Catch::Contains("bytes free beside a twentieth of its size"));
  CHECK(r.others().empty());

  // Stopped: nothing made, nothing left, no complaint.
  const std::atomic<bool> stop{true};
  held = hold_room(r.path, {200000, 300000}, uint64_t{1} << 20, stop);
  CHECK(held.made == 0);
  CHECK_FALSE(held.short_by);
  CHECK(spare_sizes(r.spares()).empty());
  CHECK(r.others().empty());
}

TEST_CASE("restore room: a spare file stopped while it is made is removed, none left half made",
          "[restore_room]") {
  Regions r;
  fs::create_directories(r.path / "kept");
  std::atomic<bool> stop{false};
  // Stopped from another thread while its pieces of 64 MiB are allocated: either whole (the stop
  // came after its last piece) or gone, never left at its temporary name.
  std::thread stopper([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!fs::exists(r.path / "kept" / ".room.tmp") && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    stop = true;
  });
  const bool made =
      make_spare(r.spares(), r.path / "kept" / ".room.tmp", uint64_t{512} << 20, stop);
  stopper.join();
  CHECK_FALSE(fs::exists(r.path / "kept" / ".room.tmp"));
  CHECK(spare_sizes(r.spares()) == (made ? Sizes{uint64_t{512} << 20} : Sizes{}));
  CHECK(r.others().empty());
  // Stopped before it begins: nothing.
  CHECK_FALSE(make_spare(r.spares(), r.path / "kept" / ".room.tmp", 4096, stop));
  CHECK_FALSE(fs::exists(r.path / "kept" / ".room.tmp"));
}
