#pragma once
// The launcher's log threshold from LOGLEVEL, the variable torchrun's own logs follow.
#include <optional>
#include <string_view>

#include <spdlog/common.h>

namespace ddprun::launcher {

// Python's logging level names, as torchrun reads LOGLEVEL (DEBUG, INFO, WARNING or WARN, ERROR,
// CRITICAL or FATAL), in any case; nullopt for anything else.
std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name);

}  // namespace ddprun::launcher
