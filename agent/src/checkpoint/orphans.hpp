#pragma once
// Checkpoint folders whose agent is gone. An agent removes its folder when it ends, and its
// guardian does after a SIGKILL; when both die at once (a batch system SIGKILLing a whole step or
// cgroup, say) the folder stays in /dev/shm holding every rank's checkpoint. So each folder names
// its owner (".owner": the agent's pid, its start time in clock ticks since boot, and its pid
// namespace), and a new agent removes the folders whose owner is no longer running. Folders of
// another user, of another pid namespace (a container sharing /dev/shm) or without an owner
// file are never touched; another user's whose owner is known to be gone are reported, so that
// they are not kept forever unseen.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::agent {

// Writes `folder`/.owner for this process. Throws std::system_error when it cannot.
void claim_checkpoint_folder(const std::filesystem::path& folder);

// What remove_orphaned_checkpoint_folders found.
struct OrphanedFolders {
  std::vector<std::string> removed;
  // Another user's folders whose owner is not running (where its owner file can be read): left
  // as they are, each with that user's id.
  std::vector<std::pair<std::string, unsigned>> of_other_users;
};

// Removes each "ddprun-checkpoints-*" folder in `dir` of this user whose owner (as written by
// claim_checkpoint_folder) is not running.
OrphanedFolders remove_orphaned_checkpoint_folders(const std::filesystem::path& dir);

}  // namespace ddprun::agent
