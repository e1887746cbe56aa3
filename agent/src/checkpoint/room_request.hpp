#pragma once
// A worker's request for room in the node's checkpoint budget (memory_use.hpp): a save whose
// region would not fit while copies kept for or held for peers take the room asks the agent to
// drop them, the oldest first, since a node's own checkpoints come before anyone's copies. The
// worker (ddprun.checkpoint) writes the bytes it lacks, in decimal, to `.room` in the node's
// checkpoint folder (by a rename: never half written) and waits, bounded, for the file to go; the
// agent's replicator reads it at its next poll, drops what it can and answers. The room freed is
// held for the worker until it makes its region: a file of that size, `.room.granted` (counted
// with the regions), made under the budget's lock before the request is removed, that the worker
// removes under the same lock as it measures. Without it a copy from a peer arriving between the
// answer and the worker's measure took the room back. Private to the agent.
#include <cstdint>
#include <filesystem>
#include <optional>

namespace ddprun::agent {

// The bytes a worker asked for in `folder` (the node's checkpoint folder); nullopt: no request.
std::optional<uint64_t> room_wanted(const std::filesystem::path& folder);
// The request in `folder` is answered: `granted` bytes held for the worker (none: 0), then the
// request removed. To be called under the budget's lock (BudgetLock). Where the room cannot be
// held (the file system refuses it) the request is still answered: the worker then measures
// without it.
void room_answered(const std::filesystem::path& folder, uint64_t granted);
// Room held for a worker that never took it (it died, or stopped waiting): released.
void room_grant_released(const std::filesystem::path& folder);

}  // namespace ddprun::agent
