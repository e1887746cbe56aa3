#include <catch2/catch.hpp>

#include "log_level.hpp"

using ddprun::launcher::parse_log_level;
using spdlog::level::level_enum;

TEST_CASE("log level: Python's level names choose the launcher's threshold", "[log_level]") {
  CHECK(parse_log_level("DEBUG") == level_enum::debug);
  CHECK(parse_log_level("INFO") == level_enum::info);
  CHECK(parse_log_level("WARNING") == level_enum::warn);
  CHECK(parse_log_level("WARN") == level_enum::warn);
  CHECK(parse_log_level("ERROR") == level_enum::err);
  CHECK(parse_log_level("CRITICAL") == level_enum::critical);
  CHECK(parse_log_level("FATAL") == level_enum::critical);
}

TEST_CASE("log level: a name is read in any case", "[log_level]") {
  CHECK(parse_log_level("debug") == level_enum::debug);
  CHECK(parse_log_level("Warning") == level_enum::warn);
}

TEST_CASE("log level: anything else is no level", "[log_level]") {
  for (const char* v : {"", "10", "DEBUG ", "verbose", "NOTSET", "INF"})
    CHECK_FALSE(parse_log_level(v).has_value());
}
