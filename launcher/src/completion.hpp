#pragma once
// --print-completion: a completion script of ddprun's options (option_table.hpp) for bash, zsh or
// tcsh. Options complete after "-", their fixed values after the option, and anything else as a
// file name (the training script and its arguments). Private to the launcher.
#include <string>

namespace ddprun::launcher {

// `shell` is bash, zsh or tcsh (the option's choices); anything else gives "".
std::string completion_script(const std::string& shell);

}  // namespace ddprun::launcher
