#include "host_turn.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ddp::node_probe {

HostTurn::HostTurn() {
  const std::string path = "/tmp/ddprun-node-probe." + std::to_string(::getuid()) + ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  int rc = -1;
  if (fd_ >= 0) {
    do {
      rc = ::flock(fd_, LOCK_EX);
    } while (rc != 0 && errno == EINTR);
  }
  if (rc != 0) {
    std::fprintf(stderr, "ddprun-node-probe: %s: %s; the compute probe runs without a turn\n",
                 path.c_str(), std::strerror(errno));
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
}

HostTurn::~HostTurn() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace ddp::node_probe
