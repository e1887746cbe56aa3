#include "node/owned_folders.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include <spdlog/spdlog.h>

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace {

struct Owner {
  long pid = 0;
  unsigned long long start_ticks = 0;
  unsigned long long pid_namespace = 0;
};

// Field 22 of /proc/<pid>/stat (after the command name, which may hold spaces and parentheses).
std::optional<unsigned long long> start_ticks(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto end_of_name = stat.rfind(')');
  if (end_of_name == std::string::npos) return std::nullopt;  // no such process
  std::istringstream fields(stat.substr(end_of_name + 1));
  std::string field;
  for (int i = 3; i < 22 && fields >> field; ++i) {
  }
  unsigned long long ticks = 0;
  if (!(fields >> ticks)) return std::nullopt;
  return ticks;
}

unsigned long long own_pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
}

std::optional<Owner> read_owner(const fs::path& folder) {
  std::ifstream in(folder / kOwnerFile);
  Owner o;
  if (!(in >> o.pid >> o.start_ticks >> o.pid_namespace) || o.pid <= 0) return std::nullopt;
  return o;
}

bool running(const Owner& o) {
  const std::optional<unsigned long long> ticks = start_ticks(o.pid);
  return ticks && *ticks == o.start_ticks;  // a pid reused by another process does not count
}

// Writes `folder`/.owner for this process.
void claim(const fs::path& folder) {
  const std::optional<unsigned long long> ticks = start_ticks(::getpid());
  std::ofstream out(folder / kOwnerFile);
  out << ::getpid() << ' ' << ticks.value_or(0) << ' ' << own_pid_namespace() << '\n';
  out.close();
  if (!out) {
    throw std::system_error(errno, std::generic_category(),
                            "cannot write " + (folder / kOwnerFile).string());
  }
}

// The names of what `folder` holds; nullopt where it cannot be listed whole.
std::optional<std::vector<std::string>> names_in(const fs::path& folder) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) return std::nullopt;
  return names;
}

std::string read_all(const fs::path& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Seconds since `path` last changed; nullopt where it cannot be read.
std::optional<std::chrono::seconds> unchanged_for(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch()) -
         std::chrono::seconds(st.st_mtim.tv_sec);
}

// Removes `folder` if it is unowned (no owner file, or one that does not read: an agent killed
// between making the folder and writing it), holds nothing else, and neither it nor its owner
// file changed for kUnownedFolderAge. rmdir refuses a folder that took anything since.
bool remove_if_unowned_and_empty(const fs::path& folder) {
  const std::optional<std::vector<std::string>> names = names_in(folder);
  if (!names || names->size() > 1 || (names->size() == 1 && names->front() != kOwnerFile)) {
    return false;
  }
  const std::optional<std::chrono::seconds> folder_age = unchanged_for(folder);
  const std::optional<std::chrono::seconds> owner_age = unchanged_for(folder / kOwnerFile);
  if (!folder_age || *folder_age < kUnownedFolderAge ||
      (owner_age && *owner_age < kUnownedFolderAge)) {
    return false;
  }
  std::error_code ignored;
  fs::remove(folder / kOwnerFile, ignored);
  return ::rmdir(folder.c_str()) == 0;
}

}  // namespace

fs::path memory_folder() {
  const char* base = std::getenv("DDPRUN_SHM_DIR");
  if (base != nullptr && *base != '\0') return base;
  return fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
}

std::string make_owned_folder(const fs::path& dir, const std::string& name_prefix) {
  for (int attempt = 0;; ++attempt) {
    std::string name = (dir / (name_prefix + "XXXXXX")).string();
    if (::mkdtemp(name.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "cannot make the folder " + name);
    }
    try {
      claim(name);
      return name;
    } catch (const std::system_error& e) {
      std::error_code ignored;
      fs::remove_all(name, ignored);  // (nothing in it names an owner)
      // Removed as unowned by another agent while this one stood still for a minute between
      // making it and claiming it (stopped, frozen): once more.
      if (attempt > 0 || e.code() != std::errc::no_such_file_or_directory) throw;
    }
  }
}

bool remove_owned_folder(const fs::path& folder) noexcept {
  try {
    const std::optional<std::vector<std::string>> names = names_in(folder);
    if (!names) {
      std::error_code ec;
      return !fs::exists(folder, ec) && !ec;
    }
    bool emptied = true;
    for (const std::string& name : *names) {
      if (name == kOwnerFile) continue;
      std::error_code failed;
      fs::remove_all(folder / name, failed);
      emptied = emptied && !failed;
    }
    if (!emptied) return false;
    const fs::path owner_file = folder / kOwnerFile;
    const std::string owner = read_all(owner_file);
    std::error_code ignored;
    fs::remove(owner_file, ignored);
    if (::rmdir(folder.c_str()) == 0 || errno == ENOENT) return true;
    // Something came into it since (a worker still running): its owner file goes back.
    if (!owner.empty()) {
      std::ofstream(owner_file) << owner;
    }
    return false;
  } catch (...) {
    return false;
  }
}

OrphanedFolders remove_orphaned_folders(const fs::path& dir, std::string_view prefix) {
  OrphanedFolders found;
  const unsigned long long ns = own_pid_namespace();
  const std::optional<std::vector<std::string>> names = names_in(dir);
  for (const std::string& name : names.value_or(std::vector<std::string>{})) {
    const fs::path path = dir / name;
    struct stat st {};
    if (!name.starts_with(prefix) || ::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      continue;
    }
    const bool ours = st.st_uid == ::geteuid();
    const std::optional<Owner> owner = read_owner(path);
    if (!owner) {
      if (ours && remove_if_unowned_and_empty(path)) found.unowned.push_back(path.string());
      continue;
    }
    if (owner->pid_namespace != ns || ns == 0 || running(*owner)) continue;
    if (!ours) {
      found.of_other_users.emplace_back(path.string(), st.st_uid);
      continue;
    }
    if (remove_owned_folder(path)) found.removed.push_back(path.string());
  }
  return found;
}

void clean_up_orphaned_folders(const fs::path& dir) {
  constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kKinds{{
      {kCheckpointFolders, "checkpoint folder"},
      {kHeartbeatFolders, "heartbeat folder"},
      {kStepTimesFolders, "step times folder"},
      {kInProcessFolders, "in-process restart folder"},
  }};
  for (const auto& [prefix, what] : kKinds) {
    const OrphanedFolders orphans = remove_orphaned_folders(dir, prefix);
    for (const std::string& orphan : orphans.removed) {
      spdlog::info("removed {}: the {} of an agent no longer running", orphan, what);
    }
    for (const std::string& orphan : orphans.unowned) {
      spdlog::info("removed {}: an empty {} without an owner, unchanged for {} s", orphan, what,
                   kUnownedFolderAge.count());
    }
    for (const auto& [orphan, uid] : orphans.of_other_users) {
      spdlog::warn(
          "{}: the {} of an agent no longer running, of another user (uid {}), holds memory; "
          "ddprun removes only its own user's: that user or root can remove it",
          orphan, what, uid);
    }
  }
}

}  // namespace ddprun::agent
