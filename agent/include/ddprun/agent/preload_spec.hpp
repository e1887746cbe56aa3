#pragma once
// What --preload names (warm_interpreter.hpp).
#include <string>
#include <vector>

namespace ddprun::agent {

struct PreloadSpec {
  // Modules to import once per node, in order; {"auto"}: torch, torch.distributed, DDP's module,
  // what DDP imports on first use and numpy, whichever of them the interpreter has. Empty: none
  // (workers start cold).
  std::vector<std::string> modules;
};

}  // namespace ddprun::agent
