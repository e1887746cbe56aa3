#pragma once
// Nodes of a job that share a host (a per-process launch, agents in containers or namespaces of
// one machine) share its cores: their compute probes take turns, or each would measure the others.
// A turn is an exclusive lock on a file of the user's in /tmp, held while the object lives.
#include <chrono>
#include <string>

namespace ddp::node_probe {

class HostTurn {
 public:
  // Waits for the host's turn until `until`. Where the lock cannot be had (a /tmp it cannot write),
  // or another probe held it all that time (one stopped or hung in its turn: it must not cost
  // every node of the host its answer), goes on without one, saying so on stderr.
  explicit HostTurn(std::chrono::steady_clock::time_point until);
  ~HostTurn();
  HostTurn(const HostTurn&) = delete;
  HostTurn& operator=(const HostTurn&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ddp::node_probe
