// libddp's replicated buffers held once per node: two local ranks (two processes, real regions in
// a folder of the test's) save buffers whose first two are the same on both; local rank 1's
// region holds only a reference and its own buffer, and both load exactly. A replicated buffer
// that differs is refused at the save by its index; local rank 0's slot altered or gone is refused
// at the load with the caller's buffers untouched (and loads once put back); where local rank 0
// saved without replicated buffers, local rank 1 keeps its own.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ddp/checkpoint.hpp"
#include "ddp/errors.hpp"

namespace fs = std::filesystem;

namespace {

constexpr size_t kReplicated = 1 << 19;  // doubles in each of the two replicated buffers (4 MiB)

void set_env(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

struct State {
  std::vector<double> weights, moments, own;
  explicit State(double fill, int rank)
      : weights(kReplicated, fill), moments(kReplicated, 2 * fill), own(1000, rank + fill) {}
  std::vector<std::span<std::byte>> buffers() {
    return {std::as_writable_bytes(std::span(weights)), std::as_writable_bytes(std::span(moments)),
            std::as_writable_bytes(std::span(own))};
  }
};

// Runs `body` as local rank `rank` of two in a child process (its own mapping of its region);
// returns what it said: "" when it returned, else the message of what it threw.
std::string as_rank(const fs::path& dir, int rank, const std::function<void()>& body) {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(out[0]);
    set_env("DDPRUN_CHECKPOINT_DIR", dir.string());
    set_env("LOCAL_RANK", std::to_string(rank));
    set_env("DDPRUN_CHECKPOINT_SLOT", std::to_string(rank));
    set_env("RANK", std::to_string(rank));
    set_env("LOCAL_WORLD_SIZE", "2");
    set_env("DDPRUN_CHECKPOINT_SLOTS", "2");
    set_env("WORLD_SIZE", "2");
    set_env("TORCHELASTIC_RUN_ID", "job");
    std::string said;
    try {
      body();
    } catch (const std::exception& e) {
      said = e.what();
      if (said.empty()) said = "(an exception without a message)";
    }
    (void)!::write(out[1], said.data(), said.size());
    ::_exit(0);
  }
  ::close(out[1]);
  std::string said;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) said.append(buf, size_t(n));
  ::close(out[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  return said;
}

// Both ranks at once (local rank 1 waits for local rank 0's save).
std::vector<std::string> both(const fs::path& dir, const std::function<void(int)>& body) {
  std::vector<std::string> said(2);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // rank 0 beside the test's own process, which runs rank 1
    const std::string mine = as_rank(dir, 0, [&] { body(0); });
    ::_exit(mine.empty() ? 0 : 1);
  }
  said[1] = as_rank(dir, 1, [&] { body(1); });
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  said[0] = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "" : "rank 0 failed";
  return said;
}

void save(int rank, double fill, size_t replicated = 2) {
  State s(fill, rank);
  const auto buffers = s.buffers();
  if (!ddp::checkpoint::save(3, buffers, replicated)) throw std::runtime_error("not saved");
}

void load_exactly(int rank, double fill) {
  set_env("DDPRUN_CHECKPOINT_STEP", "3");
  State got(-9.0, 0), want(fill, rank);
  if (ddp::checkpoint::load(got.buffers()) != 3) throw std::runtime_error("no step");
  if (got.weights != want.weights || got.moments != want.moments || got.own != want.own) {
    throw std::runtime_error("loaded other bytes than were saved");
  }
}

void load_refused_untouched() {
  set_env("DDPRUN_CHECKPOINT_STEP", "3");
  State got(-9.0, 0);
  try {
    ddp::checkpoint::load(got.buffers());
  } catch (const ddp::CheckpointError&) {
    const State untouched(-9.0, 0);
    if (got.weights != untouched.weights || got.own != untouched.own) {
      throw std::runtime_error("the caller's buffers were written");
    }
    throw;
  }
}

// Flips a byte of the newest slot's first replicated buffer in local rank 0's region.
void flip(const fs::path& region, size_t slot) {
  const int fd = ::open(region.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  uint64_t slot_size = 0;
  REQUIRE(::pread(fd, &slot_size, 8, 8) == 8);
  const off_t at = static_cast<off_t>(4096 + slot * slot_size + 4096);  // past the structure
  char c;
  REQUIRE(::pread(fd, &c, 1, at) == 1);
  c = static_cast<char>(c ^ 0xFF);
  REQUIRE(::pwrite(fd, &c, 1, at) == 1);
  ::close(fd);
}

}  // namespace

TEST_CASE(
    "sdk checkpoint: replicated buffers are held once per node, checked at the save and the load",
    "[sdk]") {
  const fs::path dir = fs::temp_directory_path() / ("ddp-replica-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<std::string> none = {"", ""};
  REQUIRE(both(dir, [](int rank) { save(rank, 1.5); }) == none);
  const auto r0 = fs::file_size(dir / "rank0"), r1 = fs::file_size(dir / "rank1");
  // Local rank 1's region: two slots of 1 MiB, the smallest; local rank 0's holds the 8 MiB.
  CHECK(r1 <= 4096 + 2 * (1u << 20));
  CHECK(r0 >= 2 * 2 * kReplicated * sizeof(double));
  CHECK(both(dir, [](int rank) { load_exactly(rank, 1.5); }) == none);

  // Local rank 0's slot (slot 0, the first save's) altered: refused, nothing copied; put back:
  // loaded.
  flip(dir / "rank0", 0);
  CHECK_THAT(as_rank(dir, 1, [] { load_refused_untouched(); }),
             Catch::Contains("which this node's regions do not hold intact"));
  flip(dir / "rank0", 0);
  CHECK(as_rank(dir, 1, [] { load_exactly(1, 1.5); }).empty());

  // A replicated buffer that differs on rank 1: its save is refused, naming the buffer.
  const auto differs = both(dir, [](int rank) { save(rank, rank == 0 ? 2.5 : 2.25); });
  CHECK(differs[0].empty());
  CHECK_THAT(differs[1], Catch::Contains("replicated buffer 0 (4194304 bytes) differs from local "
                                         "rank 0's (global rank 0)"));

  // Local rank 0 saving without replicated buffers: rank 1 keeps its own, and both load.
  fs::remove_all(dir);
  fs::create_directories(dir);
  REQUIRE(both(dir, [](int rank) { save(rank, 3.5, rank == 0 ? 0 : 2); }) == none);
  CHECK(fs::file_size(dir / "rank1") >= 2 * 2 * kReplicated * sizeof(double));
  CHECK(both(dir, [](int rank) { load_exactly(rank, 3.5); }) == none);

  // Local rank 0's region gone: rank 1's reference is refused.
  fs::remove_all(dir);
  fs::create_directories(dir);
  REQUIRE(both(dir, [](int rank) { save(rank, 4.5); }) == none);
  fs::remove(dir / "rank0");
  CHECK_THAT(as_rank(dir, 1, [] { load_refused_untouched(); }),
             Catch::Contains("which this node's regions do not hold intact"));
  fs::remove_all(dir);
}

namespace {

// The checksums and state digests of a region's two slots.
std::vector<uint64_t> words_of(const fs::path& region, size_t first, size_t stride) {
  const int fd = ::open(region.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  std::vector<uint64_t> out(2);
  for (size_t i = 0; i < 2; ++i) {
    REQUIRE(::pread(fd, &out[i], 8, static_cast<off_t>(first + stride * i)) == 8);
  }
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("sdk checkpoint: a state saved twice under one step has one state digest, two states two",
          "[sdk]") {
  const fs::path dir = fs::temp_directory_path() / ("ddp-digest-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<std::string> none = {"", ""};
  // The same state twice: each save's ordinal differs, and so its checksum, not its digest.
  REQUIRE(both(dir, [](int rank) { save(rank, 1.5), save(rank, 1.5); }) == none);
  for (const char* region : {"rank0", "rank1"}) {
    const auto checksums = words_of(dir / region, 64 + 24, 64);
    const auto digests = words_of(dir / region, 328, 8);
    CHECK(checksums[0] != checksums[1]);
    CHECK(digests[0] == digests[1]);
    CHECK(digests[0] >> 32 == 1);
  }
  // Two states under one step: two digests. (In a folder of its own: the processes are new, and
  // their saves' ordinals those of the saves above, which a referrer would take for its holder's.)
  fs::remove_all(dir);
  fs::create_directories(dir);
  REQUIRE(both(dir, [](int rank) { save(rank, 2.5), save(rank, 3.5); }) == none);
  for (const char* region : {"rank0", "rank1"}) {
    const auto digests = words_of(dir / region, 328, 8);
    CHECK(digests[0] != digests[1]);
  }
  fs::remove_all(dir);
}
