// The agent's console: lines cut for the console (prefix, '\r', long lines), and a console that is
// not drained never blocking its writer.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "ddprun/agent/console.hpp"
#include "ddprun/agent/console_lines.hpp"

using namespace ddprun::agent;

TEST_CASE("console lines: whole lines, prefixed, across reads", "[console]") {
  ConsoleLines lines("[0]:", 1024);
  CHECK(lines.feed("hel") == "");
  CHECK(lines.feed("lo\nwor") == "[0]:hello\n");
  CHECK(lines.feed("ld\n\n") == "[0]:world\n[0]:\n");
  CHECK(lines.finish() == "");
  CHECK(lines.feed("tail") == "");
  CHECK(lines.finish() == "[0]:tail\n");
}

TEST_CASE("console lines: a carriage return ends a line, as progress bars use it", "[console]") {
  ConsoleLines lines("[1]:", 1024);
  CHECK(lines.feed(" 10%\r 50%\r") == "[1]: 10%\r[1]: 50%\r");
  CHECK(lines.feed("100%\n") == "[1]:100%\n");
}

TEST_CASE("console lines: a line longer than the bound comes in pieces", "[console]") {
  ConsoleLines lines("p:", 4);
  CHECK(lines.feed("abcdefghij") == "p:abcd\np:efgh\n");
  CHECK(lines.feed("k\n") == "p:ijk\n");
  // Exactly the bound, then its terminator in the next read.
  CHECK(lines.feed("wxyz") == "p:wxyz\n");
  CHECK(lines.feed("\n") == "p:\n");
}

TEST_CASE("console: a console nobody reads never blocks the writer, and drops what does not fit",
          "[console]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::fcntl(fds[1], F_SETPIPE_SZ, 4096);
  {
    Console console(fds[1], 64 * 1024, 200);
    const auto start = std::chrono::steady_clock::now();
    const std::string line(1000, 'x');
    for (int i = 0; i < 1000; ++i) console.write(line + "\n");  // 1 MB into a 4 KiB pipe
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(took < std::chrono::seconds(1));
    CHECK(console.dropped_lines() > 800);  // at most 64 KiB queued and 4 KiB in the pipe
    // The console drains again: what was queued arrives, then one line saying what was dropped.
    std::string got;
    char buf[65536];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got.find("dropped") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    CHECK(got.find("console line(s)") != std::string::npos);
    CHECK(got.find(line + "\n") == 0);
  }
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("console lines: a keep filter passes whole matching lines only, prefixed", "[console]") {
  ConsoleLines lines("[0]:", 1024,
                     [](std::string_view line) { return line.find("loss") != std::string::npos; });
  CHECK(lines.feed("step 1 lo") == "");
  CHECK(lines.feed("ss 0.5\nno\nloss 0.4\r") == "[0]:step 1 loss 0.5\n[0]:loss 0.4\r");
  CHECK(lines.feed("tail loss") == "");
  CHECK(lines.finish() == "[0]:tail loss\n");
}
