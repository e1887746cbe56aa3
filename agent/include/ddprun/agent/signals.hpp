#pragma once
// Signal names as torchrun spells them (SIGTERM, ...).
#include <string>
#include <vector>

namespace ddprun::agent {

// "SIGTERM,SIGINT" -> {15, 2}. Accepts the signals torchrun lets a user forward: SIGTERM, SIGINT,
// SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2. Throws std::invalid_argument.
std::vector<int> parse_signal_list(const std::string& text);
// "SIGKILL" for 9; "signal N" when unnamed.
std::string signal_name(int signo);

}  // namespace ddprun::agent
