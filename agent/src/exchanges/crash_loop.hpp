#pragma once
// Crash loops: a job whose attempts keep failing the same way stops before it spends every restart
// (--crash_loop_attempts; NVIDIA's resiliency launcher stops a job that makes no progress in 3
// restarts). Each node keeps the signature of every failed attempt (the root cause, the earliest
// failure any node reported: its rank, how it ended, its exception's line and innermost frame, and
// the checkpoint step the attempt resumed from: a newer step is progress); the node that sees the
// last N agree raises the job's flag, which ends the others' rounds and tells them why.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::agent::crash_loop {

// The signature of an attempt that ended with `failures` (every node's, as reported), which resumed
// from checkpoint step `resumed_from` (none: from nothing); "" when no worker failed (nothing to
// compare: a stop for a membership change, say).
std::string signature(const std::vector<WorkerFailure>& failures,
                      std::optional<int64_t> resumed_from);

// Whether the last `attempts` signatures of `history` (oldest first) are one and the same.
bool repeats(const std::vector<std::string>& history, int attempts);

// Raises the job's crash-loop flag with `reason`. Never throws.
boost::asio::awaitable<void> announce(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                      std::string reason);
// The reason of a crash loop another node announced, or nullopt.
std::optional<std::string> announced(const rendezvous::Rendezvous& rdzv);

}  // namespace ddprun::agent::crash_loop
