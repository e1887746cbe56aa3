#pragma once
// A process environment as a sorted name -> value map.
#include <map>
#include <string>

namespace ddprun::agent {

using Environment = std::map<std::string, std::string>;

// This process's environment.
Environment current_environment();

}  // namespace ddprun::agent
