#pragma once
// What `ddprun --version` and `ddprund --version` print.
#include <string>
#include <string_view>

namespace ddprun::store {

// "<program> <version> (commit <sha>)" and, on a second line, the dialects of torch's TCPStore
// protocol the store speaks.
std::string version_text(std::string_view program);

}  // namespace ddprun::store
