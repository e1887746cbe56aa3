#include "ddprun/agent/worker_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

namespace ddprun::agent {
namespace {

[[noreturn]] void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// Opens what a stream target needs before fork(); returns the fd the child dup2()s (or -1 to
// inherit), and for kPipe the parent's read end in `read_end`.
int open_target(const StreamTarget& t, int& read_end) {
  switch (t.kind) {
    case StreamTarget::Kind::kInherit:
      return -1;
    case StreamTarget::Kind::kDevNull: {
      const int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (fd < 0) throw_errno("open /dev/null");
      return fd;
    }
    case StreamTarget::Kind::kFile: {
      const int fd = ::open(t.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + t.path);
      return fd;
    }
    case StreamTarget::Kind::kPipe: {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("pipe2");
      read_end = p[0];
      return p[1];
    }
  }
  return -1;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

WorkerProcess::WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec) : pidfd_(io) {
  // Everything the child touches is prepared here: after fork() only async-signal-safe calls
  // remain.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_fd = open_target(spec.out, stdout_pipe_);
  int err_fd = open_target(spec.err, stderr_pipe_);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw_errno("pipe2");
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the agent died before the line above took effect
    sigset_t all;
    sigemptyset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2})
      ::signal(s, SIG_DFL);
    if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int e = errno;
    [[maybe_unused]] auto n = ::write(report[1], &e, sizeof e);
    ::_exit(127);
  }
  pid_ = pid;
  running_ = true;
  // Also set from this side: a signal to the group may come before the child runs setpgid().
  ::setpgid(pid, pid);
  close_fd(out_fd);
  close_fd(err_fd);
  ::close(report[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == sizeof child_errno) {
    exec_error_ = fmt::format("cannot execute '{}': {}", spec.argv[0], std::strerror(child_errno));
  }

  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) throw_errno("pidfd_open");
  pidfd_.assign(pidfd);
}

WorkerProcess::~WorkerProcess() {
  if (running_) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  close_fd(stdout_pipe_);
  close_fd(stderr_pipe_);
}

void WorkerProcess::watch_exit(std::function<void(const ExitStatus&)> on_exit) {
  on_exit_ = std::move(on_exit);
  pidfd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [this](boost::system::error_code ec) {
                      if (ec || !running_) return;
                      int status = 0;
                      // The leader is a zombie until reaped, so its group id cannot be reused yet.
                      ::kill(-pid_, SIGKILL);
                      if (::waitpid(pid_, &status, 0) == pid_) reap(status);
                    });
}

void WorkerProcess::reap(int wait_status) {
  running_ = false;
  ExitStatus s;
  s.time = std::chrono::system_clock::now();
  s.code = WIFSIGNALED(wait_status) ? -WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
  boost::system::error_code ec;
  pidfd_.close(ec);
  if (on_exit_) on_exit_(s);
}

void WorkerProcess::signal_group(int signo) {
  if (running_) ::kill(-pid_, signo);
}

}  // namespace ddprun::agent
