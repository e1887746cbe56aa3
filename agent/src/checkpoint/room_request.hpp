#pragma once
// A worker's request for room in the node's checkpoint budget (memory_use.hpp): a save whose
// region would not fit while copies kept for or held for peers take the room asks the agent to
// drop them, the oldest first, since a node's own checkpoints come before anyone's copies. The
// worker (ddprun.checkpoint) writes the bytes it lacks, in decimal, to `.room` in the node's
// checkpoint folder (by a rename: never half written) and waits, bounded, for the file to go; the
// agent's replicator reads it at its next poll, drops what it can and removes it. Private to the
// agent.
#include <cstdint>
#include <filesystem>
#include <optional>

namespace ddprun::agent {

// The bytes a worker asked for in `folder` (the node's checkpoint folder); nullopt: no request.
std::optional<uint64_t> room_wanted(const std::filesystem::path& folder);
// The request in `folder` is answered: removed.
void room_answered(const std::filesystem::path& folder);

}  // namespace ddprun::agent
