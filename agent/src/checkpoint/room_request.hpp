#pragma once
// A worker's request for room in the node's checkpoint budget (memory_use.hpp): a save whose
// region would not fit while copies kept for or held for peers take the room asks the agent to
// drop them, the oldest first, since a node's own checkpoints come before anyone's copies.
//
// Local rank L (ddprun.checkpoint) writes the bytes it lacks, in decimal, to `.room-L` in the
// node's checkpoint folder (by a rename: never half written) and waits for the file to go (10 s of
// the time the budget's lock is free, 300 s at most); giving up, it removes the request itself,
// under the budget's lock. The agent's replicator
// reads it at its next poll, and, under the budget's lock (taken only where it is free: a worker
// holding it is never waited for on the agent's event loop), drops what it can and answers. The
// room freed is held for the worker until it makes its region: a file of that size,
// `.room-L.granted` (counted with the regions), made before the request is removed; the worker
// removes it under the lock just before it measures. Without it, a copy from a peer arriving
// between the answer and the worker's measure took the room back. A grant its worker never took
// is released by the agent. Private to the agent.
#include <cstdint>
#include <filesystem>
#include <optional>

namespace ddprun::agent {

// The bytes local rank `local_rank` asked for in `folder` (the node's checkpoint folder);
// nullopt: no request.
std::optional<uint64_t> room_wanted(const std::filesystem::path& folder, int local_rank);
// The request is answered: `granted` bytes held for the worker (none: 0), then the request
// removed. Under the budget's lock (BudgetLock). Where the file system refuses to hold the room,
// the request is answered all the same: the worker then measures without it.
void room_answered(const std::filesystem::path& folder, int local_rank, uint64_t granted);
// Room held for a worker that never took it (it died, or its round ended): released.
void room_grant_released(const std::filesystem::path& folder, int local_rank);
// A request of a worker gone or going (its round ended): removed unanswered.
void room_withdrawn(const std::filesystem::path& folder, int local_rank);

}  // namespace ddprun::agent
