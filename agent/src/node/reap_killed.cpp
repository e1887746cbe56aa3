#include "node/reap_killed.hpp"

#include <sys/wait.h>

#include <cerrno>
#include <mutex>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

namespace ddprun::agent {
namespace {

// Never destroyed: a thread reaping in the background may outlive the agent's static destructors
// (the agent ends while a killed child it handed off is still dying).
std::mutex& handed_off_mutex() {
  static auto* const m = new std::mutex;
  return *m;
}
std::set<pid_t>& handed_off() {  // under handed_off_mutex()
  static auto* const pids = new std::set<pid_t>;
  return *pids;
}

}  // namespace

bool reaped_in_background(pid_t pid) {
  const std::lock_guard lock(handed_off_mutex());
  return handed_off().contains(pid);
}

void reap_killed(pid_t pid, std::chrono::steady_clock::time_point until) {
  if (reaped_in_background(pid)) return;
  const auto started = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno != EINTR)) return;  // reaped, or not a child to reap
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  spdlog::warn(
      "process {} did not exit within {} ms of SIGKILL (in uninterruptible sleep, where a driver "
      "or a file system holds it, or still freeing its memory on a busy machine): it is reaped "
      "in the background whenever the kernel lets it go",
      pid,
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                            started)
          .count());
  {
    const std::lock_guard lock(handed_off_mutex());
    handed_off().insert(pid);
  }
  try {
    std::thread([pid] {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      const std::lock_guard lock(handed_off_mutex());
      handed_off().erase(pid);
    }).detach();
  } catch (const std::system_error&) {
    // No thread to be had: it stays a zombie once it exits, reaped by init after the agent.
  }
}

}  // namespace ddprun::agent
