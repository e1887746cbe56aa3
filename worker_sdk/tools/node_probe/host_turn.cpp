#include "host_turn.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace ddp::node_probe {
namespace {

// How often a probe waiting for the host's turn tries the lock again.
constexpr auto kTurnPoll = std::chrono::milliseconds(5);

}  // namespace

HostTurn::HostTurn(std::chrono::steady_clock::time_point until) {
  const std::string path = "/tmp/ddprun-node-probe." + std::to_string(::getuid()) + ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  int rc = -1;
  int error = errno;
  while (fd_ >= 0) {
    rc = ::flock(fd_, LOCK_EX | LOCK_NB);
    error = errno;
    if (rc == 0 || (error != EWOULDBLOCK && error != EINTR)) break;
    if (std::chrono::steady_clock::now() >= until) {
      std::fprintf(stderr,
                   "ddprun-node-probe: another probe of this host held its turn for the whole "
                   "wait; the compute probe runs without a turn\n");
      break;
    }
    std::this_thread::sleep_for(kTurnPoll);
  }
  if (rc != 0) {
    if (error != EWOULDBLOCK && error != EINTR) {
      std::fprintf(stderr, "ddprun-node-probe: %s: %s; the compute probe runs without a turn\n",
                   path.c_str(), std::strerror(error));
    }
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
}

HostTurn::~HostTurn() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace ddp::node_probe
