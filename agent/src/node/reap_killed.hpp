#pragma once
// Reaping a child the agent has sent SIGKILL. Such a child normally exits within milliseconds, but
// one in uninterruptible sleep (stuck in a GPU driver, on a hung network file system) dies only
// once the kernel lets it, which may be never: the agent's thread must not wait for that (its
// signals, keep-alives and the head's control channel would go unheard). Private to the agent.
#include <sys/types.h>

#include <chrono>

namespace ddprun::agent {

// Reaps `pid` (a child of this process, already sent SIGKILL) if it exits within `wait`; else says
// so in one warning and leaves it to a thread of its own, which reaps it whenever it exits (until
// then its pid is not reused). Never throws.
void reap_killed(pid_t pid, std::chrono::milliseconds wait = std::chrono::milliseconds(200));

}  // namespace ddprun::agent
