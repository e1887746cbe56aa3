#pragma once
// `ddprun token --auth-token-file SECRET --rdzv_id ID`: the token of one job under a ddprund's
// secret, printed on stdout. The operator keeps the secret (ddprund --auth-token-file) and gives
// each job its own token (--rdzv_conf auth_token_file=FILE holding it): with it a job reaches its
// own keys on the daemon and no other job's.
#include <string>
#include <vector>

namespace ddprun::launcher {

// Runs the subcommand (args: what follows "token"); returns the exit status: 0 printed, 2 usage
// error or an unreadable secret.
int run_token(const std::vector<std::string>& args);

}  // namespace ddprun::launcher
