#include "ddprun/agent/environment.hpp"

#include <unistd.h>

namespace ddprun::agent {

Environment current_environment() {
  Environment env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

}  // namespace ddprun::agent
