#include "host_turn.hpp"

#include <fcntl.h>
#include <sys/file.h>
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

// The pid the turn's holder wrote into the lock file; 0 where there is none (yet).
int holder(int fd) {
  char text[16] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  return n > 0 ? std::atoi(text) : 0;
}

void record_holder(int fd) {
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    std::fprintf(stderr, "ddprun-node-probe: the host's turn: cannot record this probe's pid: %s\n",
                 std::strerror(errno));
  }
}

}  // namespace

bool stopped(int pid) {
  if (pid <= 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t end = stat.rfind(')');  // the state follows the command, which may hold anything
  if (end == std::string::npos || end + 2 >= stat.size()) return false;
  const char state = stat[end + 2];
  return state == 'T' || state == 't';
}

HostTurn::HostTurn(std::chrono::steady_clock::time_point until) {
  const std::string path = "/tmp/ddprun-node-probe." + std::to_string(::getuid()) + ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) {
    std::fprintf(stderr, "ddprun-node-probe: %s: %s; the compute probe runs without a turn\n",
                 path.c_str(), std::strerror(errno));
    return;
  }
  for (;;) {
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
      record_holder(fd_);
      return;
    }
    const int error = errno;
    const char* why = nullptr;
    std::string detail;
    if (error != EWOULDBLOCK && error != EINTR) {
      detail = path + ": " + std::strerror(error);
      why = detail.c_str();
    } else if (const int pid = holder(fd_); stopped(pid)) {
      detail = "the probe holding this host's turn (pid " + std::to_string(pid) + ") is stopped";
      why = detail.c_str();
    } else if (std::chrono::steady_clock::now() >= until) {
      why = "another probe of this host held its turn for the whole wait";
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
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace ddp::node_probe
