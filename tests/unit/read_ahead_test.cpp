// A file read one chunk ahead of its sender (ReadAhead), on real files: every byte in order, the
// MAC of them all, a read that fails raised to the caller in its place, and a stop mid-way.
#include <fcntl.h>

#include <chrono>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>

#include <catch2/catch.hpp>

#include "checkpoint/copy_mac.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/read_ahead.hpp"
#include "temp_folder.hpp"

using namespace ddprun::agent;
namespace fs = std::filesystem;

namespace {

std::string pattern(size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i * 7 + i / 4093);
  return out;
}

// A file holding `bytes`, open to read, in a folder of its own.
struct CopyFile {
  ddprun::test::TempFolder folder;
  fs::path file;
  Fd fd;
  CopyFile(const std::string& name, const std::string& bytes)
      : folder(name), file(folder.path / "copy"), fd(-1) {
    std::ofstream(file, std::ios::binary) << bytes;
    fd.fd = open_or_fail(file, O_RDONLY);
  }
};

CopyMac mac() { return CopyMac(ddprun::store::Token("0123456789abcdef-job"), "checkpoints/job"); }

}  // namespace

TEST_CASE("read ahead: every byte comes out in order, in chunks, and the MAC is of them all",
          "[checkpoint]") {
  const std::string bytes = pattern((3 << 20) + 808);
  const CopyFile copy("read-ahead", "header" + bytes);
  const fs::path& file = copy.file;
  const Fd& fd = copy.fd;
  for (const size_t chunk : {size_t{1} << 20, size_t{4096}, size_t{8} << 20}) {
    CAPTURE(chunk);
    CopyMac sending = mac();
    const std::string nonce = sending.begin_sending();
    std::string got;
    size_t chunks = 0;
    {
      ReadAhead pieces(fd.fd, 6, bytes.size(), chunk, &sending, file);
      for (std::string_view piece = pieces.next(); !piece.empty(); piece = pieces.next()) {
        CHECK(piece.size() <= chunk);
        // (Held a moment, as a slow network holds it, while the thread reads on: a piece written
        // over while held differs from the file.)
        const std::string first(piece);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        CHECK(piece == first);
        CHECK(piece == std::string_view(bytes).substr(got.size(), piece.size()));
        got += piece;
        ++chunks;
      }
      CHECK(pieces.next().empty());
    }
    CHECK(got == bytes);
    CHECK(chunks == (bytes.size() + chunk - 1) / chunk);
    CopyMac checking = mac();
    checking.begin_checking(nonce);
    checking.add(bytes);
    CHECK(checking.matches(sending.finish()));
  }
  ReadAhead none(fd.fd, 0, 0, 1 << 20, nullptr, file);
  CHECK(none.next().empty());
}

TEST_CASE("read ahead: a file that ends early hands out what it has, then raises, naming it",
          "[checkpoint]") {
  const CopyFile copy("read-ahead-short", pattern(2 << 20));
  ReadAhead pieces(copy.fd.fd, 0, 5 << 20, 1 << 20, nullptr, copy.file);
  CHECK(pieces.next().size() == 1 << 20);
  CHECK(pieces.next().size() == 1 << 20);
  CHECK_THROWS_WITH(pieces.next(), Catch::Contains(copy.file.string()));
}

TEST_CASE("read ahead: one left mid-way stops, its thread waiting for a buffer released",
          "[checkpoint]") {
  // (A thread that did not stop would wait for its next buffer for ever: the case would hang.)
  const CopyFile copy("read-ahead-stop", pattern(8 << 20));
  for (int taken = 0; taken < 3; ++taken) {
    ReadAhead pieces(copy.fd.fd, 0, 8 << 20, 1 << 20, nullptr, copy.file);
    for (int i = 0; i < taken; ++i) CHECK(pieces.next().size() == 1 << 20);
  }
}
