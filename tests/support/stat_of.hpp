#pragma once
// A file's stat(2), or the test fails there.
#include <sys/stat.h>

#include <filesystem>

#include <catch2/catch.hpp>

namespace ddprun::test {

inline struct stat stat_of(const std::filesystem::path& file) {
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  return st;
}

}  // namespace ddprun::test
