#include "host_turn.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

namespace ddp::node_probe {
namespace {

// How often a probe waiting for the host's turn tries the lock again.
constexpr auto kTurnPoll = std::chrono::milliseconds(5);

// The holder's record: its pid, right-aligned in 10 characters and a newline, written over the
// last one in place (no truncation: a reader sees one record or the other); 0 once it let go.
constexpr size_t kRecord = 11;

// The pid the turn's holder recorded; 0 where there is none (none yet, or it let go).
int holder(int fd) {
  char text[kRecord + 1] = {};
  const ssize_t n = ::pread(fd, text, kRecord, 0);
  return n == static_cast<ssize_t>(kRecord) && text[kRecord - 1] == '\n' ? std::atoi(text) : 0;
}

// Whether the lock file is this user's own plain file, which no one else can write: one another
// user made or linked there (a hard link to a file of the victim's) is locked, never written.
bool own_file(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
         st.st_nlink == 1 && (st.st_mode & 022) == 0;
}

void record(int fd, int pid) {
  char text[kRecord + 1];
  std::snprintf(text, sizeof text, "%10d\n", pid);
  if (::pwrite(fd, text, kRecord, 0) != static_cast<ssize_t>(kRecord)) {
    std::fprintf(stderr, "ddprun-node-probe: the host's turn: cannot record its holder: %s\n",
                 std::strerror(errno));
  }
}

// Whether process `pid` (not this one) is stopped (state T or t in /proc/<pid>/stat); false where
// it cannot be read (gone). A pid of another pid namespace's names whatever has that number here:
// at worst a waiter measures beside a holder.
bool stopped(int pid) {
  if (pid <= 0 || pid == ::getpid()) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t end = stat.rfind(')');  // the state follows the command, which may hold anything
  if (end == std::string::npos || end + 2 >= stat.size()) return false;
  const char state = stat[end + 2];
  return state == 'T' || state == 't';
}

}  // namespace

HostTurn::HostTurn(std::chrono::steady_clock::time_point until) {
  const std::string path = "/tmp/ddprun-node-probe." + std::to_string(::getuid()) + ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) {
    std::fprintf(stderr, "ddprun-node-probe: %s: %s; the compute probe runs without a turn\n",
                 path.c_str(), std::strerror(errno));
    return;
  }
  writable_ = own_file(fd_);
  int stopped_seen = 0;  // the holder seen stopped in as many polls in a row
  for (;;) {
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
      if (writable_) record(fd_, ::getpid());
      return;
    }
    const int error = errno;
    const char* why = nullptr;
    std::string detail;
    if (error != EWOULDBLOCK && error != EINTR) {
      detail = path + ": " + std::strerror(error);
      why = detail.c_str();
    } else {
      const int pid = holder(fd_);
      // Seen stopped twice, 5 ms apart: not a passing stop (a tracer's, for one system call).
      stopped_seen = stopped(pid) ? stopped_seen + 1 : 0;
      if (stopped_seen >= 2) {
        detail = "the probe holding this host's turn (pid " + std::to_string(pid) + ") is stopped";
        why = detail.c_str();
      } else if (std::chrono::steady_clock::now() >= until) {
        why = "the host's turn did not come within the wait (a probe may be hung in it)";
      }
    }
    if (why != nullptr) {
      std::fprintf(stderr, "ddprun-node-probe: %s; the compute probe runs without a turn\n", why);
      ::close(fd_);
      fd_ = -1;
      return;
    }
    std::this_thread::sleep_for(kTurnPoll);
  }
}

HostTurn::~HostTurn() {
  if (fd_ < 0) return;
  if (writable_) record(fd_, 0);  // let go: a stopped process that held it before is no holder
  ::close(fd_);                   // releases the lock
}

}  // namespace ddp::node_probe
