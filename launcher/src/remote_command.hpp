#pragma once
// What a head node runs on each host: the ssh command line, and the shell command that ssh hands
// to the host's login shell (POSIX quoting: every argument arrives byte for byte, spaces, quotes
// and UTF-8 included).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/agent/environment.hpp"
#include "launch_config.hpp"

namespace ddprun::launcher {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// `s` as one word of a POSIX shell command: 'it'\''s'.
std::string shell_quote(std::string_view s);

// `KEY=VALUE` lines of a .ddprun_env file; blank lines and `#` comments are skipped, an `export `
// in front is allowed. Throws std::invalid_argument naming `source` and the line.
EnvList parse_env_file(std::string_view text, const std::string& source);

// The variables every host's agent gets, later entries winning: the head's NCCL_*, PYTHON*, CUDA_*
// and UCX_* variables and the interpreter ddprun was installed with, then each .ddprun_env file's
// lines (`env_files`: home's, then the current folder's), then --env. Throws std::invalid_argument
// for --env VAR naming a variable not set here.
EnvList forwarded_environment(const LaunchConfig& c, const agent::Environment& env,
                              const EnvList& env_files);

// hosts[index]'s --nproc_per_node: the head's when given, else the host's slots, else 1.
std::string host_nproc(const LaunchConfig& c, size_t index);

// The ddprun command line the agent of hosts[index] runs (`launch` first where the head ran
// `ddprun launch`): a static rendezvous on the first host, node rank `index`, --head_control, every
// other option the head was given (on its command line or by PET_*) but those only a head reads,
// then the script and its arguments.
std::vector<std::string> agent_arguments(const LaunchConfig& c, size_t index);

// `cd -- CWD && exec env -- K=V ... DDPRUN ARGS...`, every word quoted.
std::string remote_shell_command(const std::string& cwd, const EnvList& env,
                                 const std::string& ddprun_path,
                                 const std::vector<std::string>& args);

// ssh's command line for `host`: never a password prompt (BatchMode), the user's --ssh_option
// values first (ssh keeps the first value it reads), a connect timeout, then the host and
// `command`.
std::vector<std::string> ssh_command(const LaunchConfig& c, const std::string& host,
                                     const std::string& command, int connect_timeout_s);

}  // namespace ddprun::launcher
