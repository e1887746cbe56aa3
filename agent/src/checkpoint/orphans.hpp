#pragma once
// Checkpoint folders whose agent is gone. An agent removes its folder when it ends, and its
// guardian does after a SIGKILL; when both die at once (a batch system SIGKILLing a whole step or
// cgroup, say) the folder stays in /dev/shm holding every rank's checkpoint. So each folder names
// its owner (".owner": the agent's pid, its start time in clock ticks since boot, and its pid
// namespace), and a new agent removes the folders whose owner is no longer running. Folders of
// another user, of another pid namespace (a container sharing /dev/shm) or without an owner
// file are never touched.
#include <filesystem>
#include <string>
#include <vector>

namespace ddprun::agent {

// Writes `folder`/.owner for this process. Throws std::system_error when it cannot.
void claim_checkpoint_folder(const std::filesystem::path& folder);

// Removes each "ddprun-checkpoints-*" folder in `dir` whose owner (as written by
// claim_checkpoint_folder) is not running; returns the folders removed.
std::vector<std::string> remove_orphaned_checkpoint_folders(const std::filesystem::path& dir);

}  // namespace ddprun::agent
