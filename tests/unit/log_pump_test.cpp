// A worker's log pump (logs/log_pump.hpp) at the end of its worker: finish() writes out what the
// pipe holds and returns, also against a writer that outlived the worker and never stops.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "logs/log_pump.hpp"

using ddprun::agent::LogPump;
namespace fs = std::filesystem;

namespace {

struct Folder {
  fs::path path;
  Folder() {
    std::string name = (fs::temp_directory_path() / "log-pump-XXXXXX").string();
    REQUIRE(::mkdtemp(name.data()) != nullptr);
    path = name;
  }
  ~Folder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

std::string contents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("log pump: finish writes out what the pipe holds, a last line without its newline too",
          "[logs]") {
  Folder folder;
  boost::asio::io_context io;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const std::string written = "first line\nsecond, unterminated";
  REQUIRE(::write(fds[1], written.data(), written.size()) == static_cast<ssize_t>(written.size()));
  auto pump = std::make_shared<LogPump>(
      io, fds[0], ddprun::agent::open_log_file((folder.path / "log").string()), -1, "");
  pump->finish();
  ::close(fds[1]);
  CHECK(contents(folder.path / "log") == written);
}

TEST_CASE("log pump: a log file that cannot be opened is an error naming it, before any worker",
          "[logs]") {
  Folder folder;
  const std::string path = (folder.path / "missing" / "stdout.log").string();
  CHECK_THROWS_WITH(ddprun::agent::open_log_file(path), Catch::Matchers::Contains("open " + path));
  CHECK(ddprun::agent::open_log_file("") == nullptr);
}

TEST_CASE(
    "log pump: finish returns against a writer that never stops, with as much written as a pipe "
    "holds",
    "[logs]") {
  Folder folder;
  boost::asio::io_context io;
  // /dev/zero stands for a pipe whose writer is always ahead of the pump: it never runs dry.
  const int endless = ::open("/dev/zero", O_RDONLY | O_CLOEXEC);
  REQUIRE(endless >= 0);
  auto pump = std::make_shared<LogPump>(
      io, endless, ddprun::agent::open_log_file((folder.path / "log").string()), -1, "");
  const auto began = std::chrono::steady_clock::now();
  pump->finish();
  CHECK(std::chrono::steady_clock::now() - began < std::chrono::seconds(5));
  // (Not a pipe: the bound is a pipe's largest default, 1 MiB.)
  const std::string log = contents(folder.path / "log");
  CHECK(log.size() == size_t{1} << 20);
  CHECK(log.find_first_not_of('\0') == std::string::npos);
}
