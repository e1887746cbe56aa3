#pragma once
// Every option of ddprun, in --help's order: its spellings, argparse's dest (which names the PET_
// variable), what its value looks like, its line in --help, the values it may take, and whether
// torchrun reads a PET_ variable for it. parse_command_line binds each dest to where its value
// goes; --help and --print-completion are written from the same table. Private to the launcher.
#include <vector>

namespace ddprun::launcher {

struct OptionSpec {
  const char* names;  // comma-separated spellings
  const char* dest;
  const char* metavar;  // nullptr: a flag
  const char* help;
  std::vector<const char*> choices = {};  // empty: any value
  bool pet = true;                        // PET_<DEST> is its fallback
  bool repeated = false;                  // given once per value (--env A --env B)
  // ddprun's own option, which torchrun does not have: an abbreviation that also fits one of
  // torchrun's options means torchrun's (argparse_rules.hpp).
  bool ddprun_only = false;
};

// torchrun's options and ddprun's own.
const std::vector<OptionSpec>& option_table();
// What `ddprun launch` adds: torch.distributed.launch's --use-env, and the 1.x spelling.
const std::vector<OptionSpec>& launch_option_table();

}  // namespace ddprun::launcher
