#include "ddprun/agent/signals.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "ddprun/agent/split.hpp"

namespace ddprun::agent {

std::vector<int> parse_signal_list(const std::string& text) {
  static const std::pair<const char*, int> kForwardable[] = {
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},
      {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
  std::vector<int> out;
  for (std::string_view name : split(text)) {
    name.remove_prefix(std::min(name.find_first_not_of(' '), name.size()));
    name = name.substr(0, name.find_last_not_of(' ') + 1);
    bool found = false;
    for (const auto& [n, v] : kForwardable) {
      if (name == n) {
        out.push_back(v);
        found = true;
      }
    }
    if (!found) {
      throw std::invalid_argument(
          fmt::format("--signals_to_handle: '{}' is not one of SIGTERM, SIGINT, SIGHUP, SIGQUIT, "
                      "SIGUSR1, SIGUSR2",
                      name));
    }
  }
  return out;
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signo);
}

}  // namespace ddprun::agent
