// libddp's checkpoints: a region saved by one global rank, loaded as another (what a restore that
// moved the wrong slot would do), is refused, and so is one of another world size than the agents
// agreed; a rank the saved world did not have is told so; a slot that fails its CRC (two words
// swapped) reaches no buffer. Real regions in a folder of the test's.
#include <fcntl.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "ddp/checkpoint.hpp"
#include "ddp/errors.hpp"

namespace fs = std::filesystem;

namespace {

void env(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

// Swaps the 8-byte words at `a` and `b` of the file `path`.
void swap_words(const fs::path& path, off_t a, off_t b) {
  const int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  char x[8], y[8];
  REQUIRE(::pread(fd, x, 8, a) == 8);
  REQUIRE(::pread(fd, y, 8, b) == 8);
  REQUIRE(::pwrite(fd, y, 8, a) == 8);
  REQUIRE(::pwrite(fd, x, 8, b) == 8);
  ::close(fd);
}

}  // namespace

TEST_CASE(
    "sdk checkpoint: a slot is loaded only by the global rank and world that saved it, a step "
    "saved twice as the newer save",
    "[sdk]") {
  const fs::path dir = fs::temp_directory_path() / ("ddp-identity-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  env("DDPRUN_CHECKPOINT_DIR", dir.string());
  env("LOCAL_RANK", "0");
  env("RANK", "0");
  env("WORLD_SIZE", "2");
  env("TORCHELASTIC_RUN_ID", "job");
  ::unsetenv("DDPRUN_CHECKPOINT_WORLD");
  std::vector<double> saved(100);
  for (size_t i = 0; i < saved.size(); ++i) saved[i] = 0.5 * static_cast<double>(i);
  const std::vector<std::span<std::byte>> out = {std::as_writable_bytes(std::span(saved))};
  REQUIRE(ddp::checkpoint::save(3, out));

  std::vector<double> loaded(100, -1.0);
  const std::vector<std::span<std::byte>> in = {std::as_writable_bytes(std::span(loaded))};
  env("DDPRUN_CHECKPOINT_STEP", "3");
  // Rank 1 given rank 0's region: refused, and nothing copied into its buffers.
  env("RANK", "1");
  CHECK_THROWS_WITH(ddp::checkpoint::load(in),
                    Catch::Contains("holds global rank 0's state, not this rank's (1)"));
  CHECK(loaded[1] == -1.0);
  // The agents agreed the step was saved by 3 ranks: a slot saved by 2 is refused.
  env("RANK", "0");
  env("DDPRUN_CHECKPOINT_WORLD", "3");
  CHECK_THROWS_WITH(ddp::checkpoint::load(in), Catch::Contains("not of the 3 the agents agreed"));
  // A world grown to 4 from the 2 that saved it: rank 3 has no counterpart.
  env("DDPRUN_CHECKPOINT_WORLD", "2");
  env("WORLD_SIZE", "4");
  env("RANK", "3");
  CHECK_THROWS_WITH(ddp::checkpoint::load(in), Catch::Contains("rank 3 has no counterpart"));
  // Rank 0 of that world restores what rank 0 saved; not while two of its doubles are swapped
  // (slot 0's payload at 4096: the structure's 64 bytes, then the buffer).
  env("RANK", "0");
  const fs::path region = dir / "rank0";
  swap_words(region, 4096 + 64 + 8 * 1, 4096 + 64 + 8 * 50);
  CHECK_THROWS_WITH(ddp::checkpoint::load(in), Catch::Contains("fails its checksum"));
  CHECK(loaded[1] == -1.0);
  swap_words(region, 4096 + 64 + 8 * 1, 4096 + 64 + 8 * 50);
  CHECK(ddp::checkpoint::load(in) == 3);
  CHECK(loaded == saved);
  // Step 3 saved twice more (the third save back in slot 0): the newest save's is loaded.
  env("WORLD_SIZE", "2");
  for (double scale : {2.0, 3.0}) {
    for (size_t i = 0; i < saved.size(); ++i) saved[i] = scale * static_cast<double>(i);
    REQUIRE(ddp::checkpoint::save(3, out));
  }
  CHECK(ddp::checkpoint::load(in) == 3);
  CHECK(loaded == saved);
  for (const char* name :
       {"DDPRUN_CHECKPOINT_DIR", "DDPRUN_CHECKPOINT_STEP", "DDPRUN_CHECKPOINT_WORLD"}) {
    ::unsetenv(name);
  }
  fs::remove_all(dir);
}
