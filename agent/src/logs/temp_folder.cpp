#include "ddprun/agent/temp_folder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::agent {
namespace fs = std::filesystem;

namespace {

// Whether a file can be created in `folder` (and is removed again), as Python checks it.
bool takes_a_file(const fs::path& folder) {
  std::string name = (folder / "ddprun-tmp-XXXXXX").string();
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) return false;
  const bool written = ::write(fd, "blat", 4) == 4;
  ::close(fd);
  ::unlink(name.c_str());
  return written;
}

}  // namespace

fs::path temp_folder(const Environment& env) {
  std::vector<fs::path> candidates;
  for (const char* name : {"TMPDIR", "TEMP", "TMP"}) {
    if (auto it = env.find(name); it != env.end() && !it->second.empty()) {
      candidates.emplace_back(it->second);
    }
  }
  for (const char* folder : {"/tmp", "/var/tmp", "/usr/tmp"}) candidates.emplace_back(folder);
  std::error_code ec;
  candidates.push_back(fs::current_path(ec));
  std::string tried;
  for (const fs::path& candidate : candidates) {
    if (candidate.empty()) continue;
    const fs::path folder = fs::absolute(candidate, ec).lexically_normal();
    if (ec) continue;
    const fs::path normal = folder.has_filename() || folder == folder.root_path()
                                ? folder
                                : folder.parent_path();  // "/scratch/" is "/scratch"
    if (takes_a_file(normal)) return normal;
    tried += (tried.empty() ? "" : ", ") + normal.string();
  }
  throw std::runtime_error("no folder for temporary files takes a file (tried " + tried +
                           "): set TMPDIR to one that does");
}

}  // namespace ddprun::agent
