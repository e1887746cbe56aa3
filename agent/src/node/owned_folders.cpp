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

}  // namespace

fs::path memory_folder() {
  const char* base = std::getenv("DDPRUN_SHM_DIR");
  if (base != nullptr && *base != '\0') return base;
  return fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
}

std::string make_owned_folder(const fs::path& dir, const std::string& name_prefix) {
  std::string name = (dir / (name_prefix + "XXXXXX")).string();
  if (::mkdtemp(name.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "cannot make the folder " + name);
  }
  try {
    claim(name);
  } catch (const std::system_error&) {
    std::error_code ignored;
    fs::remove_all(name, ignored);  // (nothing in it names an owner)
    throw;
  }
  return name;
}

bool remove_owned_folder(const fs::path& folder) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    if (e.path().filename() != kOwnerFile) entries.push_back(e.path());
  }
  if (ec) return !fs::exists(folder, ec);
  bool emptied = true;
  for (const fs::path& entry : entries) {
    std::error_code failed;
    fs::remove_all(entry, failed);
    emptied = emptied && !failed;
  }
  if (!emptied) return false;
  fs::remove(folder / kOwnerFile, ec);
  return fs::remove(folder, ec) && !ec;
}

OrphanedFolders remove_orphaned_folders(const fs::path& dir, std::string_view prefix) {
  OrphanedFolders found;
  const unsigned long long ns = own_pid_namespace();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    struct stat st {};
    if (!name.starts_with(prefix) || ::lstat(e.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      continue;
    }
    if (!fs::exists(e.path() / kOwnerFile, ec)) {
      // Unowned: removed where it is this user's, empty (rmdir refuses one that holds anything,
      // also one an agent wrote its owner file into since) and unchanged for the age.
      const auto changed = std::chrono::seconds(st.st_mtim.tv_sec);
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      if (st.st_uid == ::geteuid() && now - changed >= kUnownedFolderAge &&
          ::rmdir(e.path().c_str()) == 0) {
        found.removed.push_back(e.path().string());
      }
      continue;
    }
    const std::optional<Owner> owner = read_owner(e.path());
    if (!owner || owner->pid_namespace != ns || ns == 0 || running(*owner)) continue;
    if (st.st_uid != ::geteuid()) {
      found.of_other_users.emplace_back(e.path().string(), st.st_uid);
      continue;
    }
    if (remove_owned_folder(e.path())) found.removed.push_back(e.path().string());
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
    for (const auto& [orphan, uid] : orphans.of_other_users) {
      spdlog::warn(
          "{}: the {} of an agent no longer running, of another user (uid {}), holds memory; "
          "ddprun removes only its own user's: that user or root can remove it",
          orphan, what, uid);
    }
  }
}

}  // namespace ddprun::agent
