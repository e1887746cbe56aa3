// libddp's reading of a region (checkpoint_region.hpp) against tests/data/region_v3.golden, the
// file the agent's reader and writer and ddprun.checkpoint are held to as well: each field where
// the format puts it, the payloads' CRC-32 and the run tag computed as the golden says.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "checkpoint_region.hpp"
#include "golden_region.hpp"
#include "temp_folder.hpp"

namespace {

// The golden region in a file of its own.
std::string written(const std::filesystem::path& folder, const std::string& bytes) {
  const std::string path = (folder / "rank0").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  return path;
}

}  // namespace

TEST_CASE("sdk checkpoint: the golden region reads field by field", "[checkpoint]") {
  const ddprun::test::GoldenRegion g = ddprun::test::read_golden_region();
  const ddprun::test::TempFolder folder("ddprun-golden");
  const std::unique_ptr<ddp::checkpoint::Region> region =
      ddp::checkpoint::existing_region(written(folder.path, g.bytes), false);
  REQUIRE(region);
  CHECK(region->slot_size == g.word("slot_size"));
  for (int i = 0; i < 2; ++i) {
    const std::string s = "slot" + std::to_string(i) + ".";
    const ddp::checkpoint::Record& r = *region->record(i);
    ddprun::test::check_record(g, i, r);
    CHECK(region->rank(i) == g.signed_word(s + "rank"));
    CHECK(region->run(i) == g.word(s + "run_tag"));
    CHECK(region->word<uint64_t>(ddp::checkpoint::kSaveTime + 8 * i) == g.word(s + "save_micros"));
    CHECK(region->word<uint64_t>(ddp::checkpoint::kStateDigestAt + 8 * i) ==
          g.word(s + "state_digest"));
    const std::string& payload = g.text(s + "payload");
    CHECK(std::string(reinterpret_cast<const char*>(region->payload(i)), payload.size()) ==
          payload);
    CHECK(ddp::checkpoint::crc_of(0, region->payload(i), r.size) == r.checksum);
  }
  CHECK(std::string(reinterpret_cast<const char*>(region->map), 8) ==
        std::string(ddp::checkpoint::kMagic, 8));
  CHECK(ddp::checkpoint::run_tag("golden-run") == g.word("slot0.run_tag"));
  CHECK(ddp::checkpoint::kCommitted == g.word("slot0.state"));
}
