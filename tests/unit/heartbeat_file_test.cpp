// The heartbeat file as a worker writes it: counter changes are beats, the counter's top bit says
// the worker's program ended (ddprun's warm interpreter sets it at a worker's exit).
#include <cstdint>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include "watchers/heartbeat_file.hpp"

using ddprun::agent::HeartbeatFile;

namespace {

void write_counter(const std::string& path, uint64_t counter) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(::pwrite(fd, &counter, sizeof counter, 0) == sizeof counter);
  ::close(fd);
}

}  // namespace

TEST_CASE("heartbeat file: a counter's top bit says the program ended without a new count",
          "[hang]") {
  // (The file is removed with the object.)
  HeartbeatFile file((std::filesystem::temp_directory_path() /
                      ("ddprun-heartbeat-test." + std::to_string(::getpid())))
                         .string());
  CHECK_FALSE(file.beat());
  write_counter(file.path(), 7);
  CHECK(file.beat());
  CHECK_FALSE(file.ended());
  // The warm interpreter's mark at the exit: its write changes the file's time, as a shell's
  // `touch` would (set here, where both writes may fall in one tick of the clock).
  write_counter(file.path(), 7 | uint64_t{1} << 63);
  const timespec later[2] = {{0, UTIME_OMIT}, {2'000'000'000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, file.path().c_str(), later, 0) == 0);
  CHECK_FALSE(file.beat());
  CHECK(file.ended());
  write_counter(file.path(), 8);  // a beat after it does not take the end back
  CHECK(file.beat());
  CHECK(file.ended());
}
