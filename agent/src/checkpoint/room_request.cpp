#include "checkpoint/room_request.hpp"

#include <charconv>
#include <fstream>
#include <string>
#include <system_error>

namespace ddprun::agent {
namespace {
constexpr const char* kRequest = ".room";
}

std::optional<uint64_t> room_wanted(const std::filesystem::path& folder) {
  std::ifstream in(folder / kRequest);
  std::string text;
  if (!in || !std::getline(in, text)) return std::nullopt;
  uint64_t bytes = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  if (ec != std::errc() || end == text.data()) {  // not a request: answered (removed) as one
    room_answered(folder);
    return std::nullopt;
  }
  return bytes;
}

void room_answered(const std::filesystem::path& folder) {
  std::error_code ignored;
  std::filesystem::remove(folder / kRequest, ignored);
}

}  // namespace ddprun::agent
