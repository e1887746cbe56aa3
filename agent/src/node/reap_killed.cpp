#include "node/reap_killed.hpp"

#include <sys/wait.h>

#include <cerrno>
#include <thread>

#include <spdlog/spdlog.h>

namespace ddprun::agent {

void reap_killed(pid_t pid, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    int status = 0;
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno != EINTR)) return;  // reaped, or not a child to reap
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  spdlog::warn(
      "process {} did not exit within {} ms of SIGKILL (uninterruptible sleep: a driver or a "
      "file system holds it): it is reaped in the background whenever the kernel lets it go",
      pid, wait.count());
  try {
    std::thread([pid] {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }).detach();
  } catch (const std::system_error&) {
    // No thread to be had: it stays a zombie once it exits, reaped by init after the agent.
  }
}

}  // namespace ddprun::agent
