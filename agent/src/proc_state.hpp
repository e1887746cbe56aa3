#pragma once
// A process's scheduler state and kernel wait channel, read from /proc (Linux).
#include <optional>
#include <string>
#include <string_view>

#include <sys/types.h>

namespace ddprun::agent {

// The state letter of a /proc/<pid>/stat line ('R', 'S', 'D', 'Z', ...): the first field after the
// command name, which may itself hold spaces and parentheses (so the last ')' ends it). nullopt
// when the text is not such a line.
std::optional<char> proc_state_of(std::string_view stat_line);

// The state of process `pid`, or nullopt when it is gone or unreadable.
std::optional<char> read_proc_state(pid_t pid);

// The kernel function `pid` waits in (/proc/<pid>/wchan), or "?" when unknown.
std::string read_wchan(pid_t pid);

}  // namespace ddprun::agent
