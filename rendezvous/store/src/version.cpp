#include "ddprun/store/version.hpp"

#include <fmt/format.h>

namespace ddprun::store {

extern const char* const kBuildCommit;  // commit.cpp, written at every build

std::string version_text(std::string_view program) {
  return fmt::format(
      "{} {} (commit {})\nstore: torch's TCPStore protocol, the legacy dialect (torch 2.1 and "
      "earlier) and the modern one (torch 2.3 and later), told apart per connection",
      program, DDPRUN_VERSION, kBuildCommit);
}

}  // namespace ddprun::store
