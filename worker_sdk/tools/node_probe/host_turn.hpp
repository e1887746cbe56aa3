#pragma once
// Nodes of a job that share a host (a per-process launch, agents in containers or namespaces of
// one machine) share its cores: their compute probes take turns, or each would measure the others.
// A turn is an exclusive lock on a file of the user's in /tmp, held while the object lives; its
// holder records its pid in the file (only where the file is the user's own plain file, which no
// one else can write, with no other link), so that a waiter can tell a holder that was stopped.
#include <chrono>
#include <string>

namespace ddp::node_probe {

class HostTurn {
 public:
  // Waits for the host's turn. Goes on without one, saying so on stderr, where the lock cannot
  // be had (a /tmp it cannot write), where its holder is stopped (SIGSTOP, a debugger: it is not
  // computing, and may never give the turn back), or where the holder kept it until `until` (one
  // hung in its turn): such a holder costs its own node its answer, not every node of the host.
  explicit HostTurn(std::chrono::steady_clock::time_point until);
  ~HostTurn();
  HostTurn(const HostTurn&) = delete;
  HostTurn& operator=(const HostTurn&) = delete;

 private:
  int fd_ = -1;
  bool writable_ = false;  // the lock file is ours to record the holder in
};

}  // namespace ddp::node_probe
