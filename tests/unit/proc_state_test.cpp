#include <catch2/catch.hpp>

#include <unistd.h>

#include "proc_state.hpp"

using namespace ddprun::agent;

// Lines recorded from /proc/<pid>/stat on Linux 6.x.
TEST_CASE("proc state: the letter after the command name however it is spelled", "[proc]") {
  // The parent of a vfork() whose child never execs: uninterruptible sleep.
  CHECK(proc_state_of("31159 (vf) D 31152 31152 10271 0 -1 4194304 114 0 0 0 0 0 0 0 20 0 1 0 "
                      "2415945 2400256 239 18446744073709551615 93919602200576") == 'D');
  // A command named "x) R (y": only the last ')' ends the name.
  CHECK(proc_state_of("31156 (x) R (y) S 31155 31152 10271 0 -1 4194304 146 0 0 0 0 0 0 0 20 0 1 "
                      "0 2415925 2990080 389") == 'S');
  CHECK(proc_state_of("7 (zombie) Z 1 7 7 0 -1") == 'Z');
  CHECK_FALSE(proc_state_of(""));
  CHECK_FALSE(proc_state_of("31156 no parentheses S"));
  CHECK_FALSE(proc_state_of("31156 (truncated)"));
  CHECK_FALSE(proc_state_of("31156 (x)S 1"));  // no space: not the kernel's format
}

TEST_CASE("proc state: this process runs and a gone one has none", "[proc]") {
  CHECK(read_proc_state(::getpid()) == 'R');
  CHECK_FALSE(read_proc_state(0x3fffffff));
  CHECK(read_wchan(0x3fffffff) == "?");
}
