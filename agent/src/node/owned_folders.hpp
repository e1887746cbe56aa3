#pragma once
// The folders an agent keeps in memory for its run: its in-memory checkpoints
// ("ddprun-checkpoints-"), the workers' heartbeat files ("ddprun-heartbeats-"), their step times
// ("ddprun-steps-") and their in-process restart channels ("ddprun-inprocess-"). An agent removes
// them when it ends, and its guardian does after a SIGKILL; when both die at once (a batch system
// SIGKILLing a whole step or cgroup, say) they stay in memory. So each folder names its owner
// (".owner": the agent's pid, its start time in clock ticks since boot, and its pid namespace), and
// a new agent removes the folders of each kind it makes whose owner is no longer running. Whoever
// removes a folder removes its owner file last (remove_owned_folder, and the guardian's own
// clean-up), so that one left half-removed still names its owner. Folders of another user, or
// owned by an agent of another pid namespace (a container sharing /dev/shm), are never touched,
// nor is one without an owner that holds anything; an empty one without (its agent killed between
// making it and writing the owner file, or as it wrote it) is removed once unchanged for a minute.
// Another user's whose owner is known to be gone are reported, so that they are not kept forever
// unseen.
#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun::agent {

// The kinds of folders, by the start of their names.
inline constexpr const char* kCheckpointFolders = "ddprun-checkpoints-";
inline constexpr const char* kHeartbeatFolders = "ddprun-heartbeats-";
inline constexpr const char* kStepTimesFolders = "ddprun-steps-";
inline constexpr const char* kInProcessFolders = "ddprun-inprocess-";

// The file in each folder naming its owner.
inline constexpr const char* kOwnerFile = ".owner";

// How old an empty folder without an owner file must be to be removed: an agent writes its owner
// file at once after making it, so that one younger may be an agent's about to.
inline constexpr std::chrono::seconds kUnownedFolderAge{60};

// Where the agent's folders go: $DDPRUN_SHM_DIR where set, else /dev/shm, else the temp folder.
std::filesystem::path memory_folder();

// Makes `dir`/`name_prefix`XXXXXX (mode 0700) and writes its .owner for this process; returns its
// path. Throws std::system_error when it cannot (and leaves no folder behind).
std::string make_owned_folder(const std::filesystem::path& dir, const std::string& name_prefix);

// Removes `folder` and what it holds, its owner file last: where anything else cannot be removed,
// the owner file and the folder stay (with what could not go), for the next agent to try again;
// where something came into it meanwhile, the owner file is put back. Returns whether the folder
// is gone. Never throws (it runs in destructors).
bool remove_owned_folder(const std::filesystem::path& folder) noexcept;

// What remove_orphaned_folders found.
struct OrphanedFolders {
  std::vector<std::string> removed;
  // Empty folders without an owner (or with an owner file that does not read) removed.
  std::vector<std::string> unowned;
  // Another user's folders whose owner is not running (where its owner file can be read): left
  // as they are, each with that user's id.
  std::vector<std::pair<std::string, unsigned>> of_other_users;
};

// Removes each folder "`prefix`*" in `dir` of this user whose owner (as make_owned_folder wrote
// it) is not running, and each one of this user without an owner that holds nothing (but an owner
// file that does not read: an agent killed as it wrote it), unchanged for kUnownedFolderAge.
OrphanedFolders remove_orphaned_folders(const std::filesystem::path& dir, std::string_view prefix);

// remove_orphaned_folders for every kind of the agent's folders, saying what it did in the log:
// each folder removed ("removed P: the checkpoint folder of an agent no longer running") and each
// of another user's (a warning).
void clean_up_orphaned_folders(const std::filesystem::path& dir);

}  // namespace ddprun::agent
