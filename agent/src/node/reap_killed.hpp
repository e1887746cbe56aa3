#pragma once
// Reaping a child the agent has sent SIGKILL. Such a child normally exits within milliseconds, but
// one in uninterruptible sleep (stuck in a GPU driver, on a hung network file system) dies only
// once the kernel lets it, which may be never: the agent's thread must not wait for that (its
// signals, keep-alives and the head's control channel would go unheard). Private to the agent.
#include <sys/types.h>

#include <chrono>

namespace ddprun::agent {

// How long a killed child is waited for before it is left to a thread of its own.
constexpr std::chrono::milliseconds kReapWait{200};

// Reaps `pid` (a child of this process, already sent SIGKILL) if it exits by `until`; else says so
// in one warning and leaves it to a thread of its own, which reaps it whenever it exits (until then
// its pid is not reused). Never throws.
void reap_killed(pid_t pid, std::chrono::steady_clock::time_point until);
inline void reap_killed(pid_t pid) {
  reap_killed(pid, std::chrono::steady_clock::now() + kReapWait);
}
// Whether `pid` was left to such a thread and has not exited yet: it needs no further kill.
bool reaped_in_background(pid_t pid);

}  // namespace ddprun::agent
