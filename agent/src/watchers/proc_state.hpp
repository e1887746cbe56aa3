#pragma once
// A process's scheduler state and kernel wait channel, read from /proc (Linux).
#include <chrono>
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

// The time a thread has spent runnable but waiting for a CPU, from its /proc/<pid>/schedstat line
// ("<ns on a CPU> <ns waiting on a run queue> <time slices>"); nullopt when the text is not one.
std::optional<std::chrono::nanoseconds> cpu_wait_of(std::string_view schedstat_line);

// That time for the main thread of `pid`; nullopt when it is gone or the kernel does not say.
std::optional<std::chrono::nanoseconds> read_cpu_wait(pid_t pid);

}  // namespace ddprun::agent
