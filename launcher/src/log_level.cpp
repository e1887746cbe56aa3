#include "log_level.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace ddprun::launcher {

std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name) {
  using spdlog::level::level_enum;
  static constexpr std::array<std::pair<std::string_view, level_enum>, 7> kNames{{
      {"DEBUG", level_enum::debug},
      {"INFO", level_enum::info},
      {"WARNING", level_enum::warn},
      {"WARN", level_enum::warn},
      {"ERROR", level_enum::err},
      {"CRITICAL", level_enum::critical},
      {"FATAL", level_enum::critical},
  }};
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const auto& [known, level] : kNames) {
    if (upper == known) return level;
  }
  return std::nullopt;
}

}  // namespace ddprun::launcher
