#include "ddprun/agent/worker_process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun::agent {
namespace {

[[noreturn]] void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// Closes its descriptor unless released: nothing leaks when the constructor throws half-way.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// Opens what a stream target needs before fork(): the descriptor the child dup2()s (none to
// inherit) and, for kPipe, the parent's read end.
struct StreamFds {
  UniqueFd child;
  UniqueFd parent_read;
};

StreamFds open_target(const StreamTarget& t) {
  StreamFds fds;
  switch (t.kind) {
    case StreamTarget::Kind::kInherit:
      break;
    case StreamTarget::Kind::kDevNull:
      fds.child.reset(::open("/dev/null", O_WRONLY | O_CLOEXEC));
      if (fds.child.get() < 0) throw_errno("open /dev/null");
      break;
    case StreamTarget::Kind::kFile:
      fds.child.reset(::open(t.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
      if (fds.child.get() < 0)
        throw std::system_error(errno, std::generic_category(), "open " + t.path);
      break;
    case StreamTarget::Kind::kPipe: {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("pipe2");
      fds.parent_read.reset(p[0]);
      fds.child.reset(p[1]);
      break;
    }
  }
  return fds;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// fork(), with the child created inside the cgroup whose folder `cgroup_dir` is open when it is
// >= 0 (clone3 with CLONE_INTO_CGROUP, Linux 5.7). Moving a process afterwards by writing to
// cgroup.procs takes the cgroup hierarchy's write lock, which waits for an RCU grace period: with
// 8 workers that was most of the launcher's own start. `*moved` says whether the child is in the
// cgroup already; when the kernel refuses clone3 this is a plain fork() and it is not.
pid_t fork_into(int cgroup_dir, bool* moved) {
  *moved = false;
  if (cgroup_dir >= 0) {
    clone_args args{};
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = static_cast<__u64>(cgroup_dir);
    const long pid = ::syscall(SYS_clone3, &args, sizeof args);
    if (pid >= 0) {
      *moved = true;
      return static_cast<pid_t>(pid);
    }
  }
  return ::fork();
}

// Whether the kernel marks a range of descriptors close-on-exec in one call (close_range with
// CLOSE_RANGE_CLOEXEC, Linux 5.11); asked once, on an empty range.
bool kernel_marks_ranges() {
  static const bool yes = ::syscall(SYS_close_range, ~0U - 1, ~0U, CLOSE_RANGE_CLOEXEC) == 0;
  return yes;
}

// This process's open descriptors, listed before fork() where the kernel cannot mark a range.
std::vector<int> open_descriptors() {
  std::vector<int> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') out.push_back(std::atoi(e->d_name));
  }
  ::closedir(dir);
  return out;
}

// In the child: every descriptor from `first` on is closed by exec, as torchrun's workers get
// nothing of the agent's but their standard streams (subprocess's close_fds). Without it a worker
// would hold the agent's sockets (Asio opens them without close-on-exec) for its whole life: the
// store's listening port, connections the agent closed, other workers' pipes. `listed`: the
// descriptors open at fork() where the kernel cannot mark a range (async-signal-safe either way).
void close_on_exec_from(int first, const std::optional<std::vector<int>>& listed) {
  if (!listed) {
    ::syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, CLOSE_RANGE_CLOEXEC);
    return;
  }
  for (int fd : *listed) {
    if (fd >= first) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
}

}  // namespace

WorkerProcess::WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec,
                             std::unique_ptr<WorkerCgroup> cgroup, ForkServer* server)
    : pidfd_(io), cgroup_(std::move(cgroup)) {
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

  StreamFds out = open_target(spec.out);
  StreamFds err = open_target(spec.err);
  const int out_fd = out.child.get();
  const int err_fd = err.child.get();
  UniqueFd in_read, in_write;
  if (spec.stdin_pipe) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("pipe2");
    in_read.reset(p[0]);
    in_write.reset(p[1]);
  }
  const int in_fd = in_read.get();
  int report_fds[2];
  if (::pipe2(report_fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  UniqueFd report_read(report_fds[0]), report_write(report_fds[1]);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : spec.cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
  }
  const bool bind = !spec.cpus.empty();
  const bool debuggable = spec.debuggable;
  const pid_t parent = ::getpid();
  const int cgroup_procs = cgroup_ ? cgroup_->procs_fd() : -1;
  const int cgroup_dir = cgroup_ ? cgroup_->dir_fd() : -1;

  const int pass_fd = spec.pass_fd;
  std::optional<pid_t> served;
  if (server != nullptr) {
    served = server->start(
        spec, ChildFds{in_fd >= 0 ? in_fd : STDIN_FILENO, out_fd >= 0 ? out_fd : STDOUT_FILENO,
                       err_fd >= 0 ? err_fd : STDERR_FILENO, cgroup_procs});
  }
  std::optional<std::vector<int>> listed;  // (only for a child forked here)
  if (!served && !kernel_marks_ranges()) listed = open_descriptors();
  bool in_cgroup = false;
  // Every signal stays blocked from the fork until the child has put back the default dispositions:
  // a stop signal that reaches it before its exec must not run the agent's handlers there (they
  // would report it to the agent as the agent's own signal, through the descriptors they share).
  sigset_t all, before;
  sigfillset(&all);
  if (!served) ::pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid = served ? *served : fork_into(cgroup_dir, &in_cgroup);
  if (pid != 0 && !served) ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) throw_errno("fork");
  if (pid == 0) {
    for (int s = 1; s < NSIG; ++s) {
      struct sigaction now {};
      if (::sigaction(s, nullptr, &now) == 0 && now.sa_handler != SIG_IGN &&
          now.sa_handler != SIG_DFL) {
        ::signal(s, SIG_DFL);
      }
    }
    // And those the agent ignores (SIGPIPE), which exec would keep ignored.
    for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2})
      ::signal(s, SIG_DFL);
    ::setpgid(0, 0);
    if (cgroup_procs >= 0 && !in_cgroup) {
      [[maybe_unused]] auto moved = ::write(cgroup_procs, "0", 1);  // this process, into it
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    // (The agent died before PR_SET_PDEATHSIG took effect.) PR_SET_PTRACER fails harmlessly
    // without Yama.
    if (debuggable) ::prctl(PR_SET_PTRACER, parent, 0, 0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (bind && ::sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
      const int e = -errno;  // negative: the binding failed, not the exec
      [[maybe_unused]] auto n = ::write(report_write.get(), &e, sizeof e);
      ::_exit(127);
    }
    if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
    if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    if (pass_fd >= 0) {
      if (pass_fd == 3) {
        ::fcntl(3, F_SETFD, 0);
      } else {
        ::dup2(pass_fd, 3);
      }
    }
    close_on_exec_from(pass_fd >= 0 ? 4 : 3, listed);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int e = errno;
    [[maybe_unused]] auto n = ::write(report_write.get(), &e, sizeof e);
    ::_exit(127);
  }
  // Also set from this side: a signal to the group may come before the child runs setpgid().
  ::setpgid(pid, pid);
  out.child.reset();
  err.child.reset();
  in_read.reset();
  report_write.reset();
  if (!served) {
    // Read when the process has exited, not here: waiting for each exec would start the workers
    // one after another.
    report_fd_ = report_read.release();
    program_ = spec.argv[0];
    cpus_ = spec.cpus;
  }

  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int e = errno;
    ::kill(-pid, SIGKILL);  // the destructor will not run: do not leave the child behind
    if (cgroup_) cgroup_->kill_all();
    int status = 0;
    ::waitpid(pid, &status, 0);
    throw std::system_error(e, std::generic_category(), "pidfd_open");
  }
  pidfd_.assign(pidfd);
  pid_ = pid;
  running_ = true;
  stdout_pipe_ = out.parent_read.release();
  stderr_pipe_ = err.parent_read.release();
  stdin_pipe_ = in_write.release();
}

WorkerProcess::~WorkerProcess() {
  if (running_) {
    ::kill(-pid_, SIGKILL);
    if (cgroup_) cgroup_->kill_all();
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  close_fd(stdout_pipe_);
  close_fd(stderr_pipe_);
  close_fd(stdin_pipe_);
  close_fd(report_fd_);
}

void WorkerProcess::watch_exit(std::function<void(const ExitStatus&)> on_exit) {
  on_exit_ = std::move(on_exit);
  await_exit();
}

void WorkerProcess::await_exit() {
  pidfd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [this](boost::system::error_code ec) {
                      if (ec || !running_) return;
                      if (!exited()) {
                        await_exit();
                        return;
                      }
                      int status = 0;
                      // The leader is a zombie until reaped, so its group id cannot be reused yet.
                      ::kill(-pid_, SIGKILL);
                      if (cgroup_) cgroup_->kill_all();
                      if (::waitpid(pid_, &status, 0) == pid_) reap(status);
                    });
}

bool WorkerProcess::exited() const {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return true;  // not this process's child any more: nothing left to wait for
  }
  return info.si_pid == pid_;
}

void WorkerProcess::read_exec_report() {
  if (report_fd_ < 0) return;
  int child_errno = 0;
  ssize_t n = 0;
  do {
    n = ::read(report_fd_, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close_fd(report_fd_);
  if (n == sizeof child_errno && child_errno < 0) {
    exec_error_ = fmt::format("cannot bind '{}' to CPUs {}: {}", program_, fmt::join(cpus_, ","),
                              std::strerror(-child_errno));
  } else if (n == sizeof child_errno) {
    exec_error_ = fmt::format("cannot execute '{}': {}", program_, std::strerror(child_errno));
  }
}

void WorkerProcess::reap(int wait_status) {
  running_ = false;
  read_exec_report();
  ExitStatus s;
  s.time = std::chrono::system_clock::now();
  s.code = WIFSIGNALED(wait_status) ? -WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
  s.oom_killed = cgroup_ && cgroup_->oom_killed();
  boost::system::error_code ec;
  pidfd_.close(ec);
  if (on_exit_) on_exit_(s);
}

void WorkerProcess::abandon() {
  running_ = false;
  boost::system::error_code ec;
  pidfd_.close(ec);
}

void WorkerProcess::signal_group(int signo) {
  if (!running_) return;
  ::kill(-pid_, signo);
  if (!cgroup_) return;
  for (pid_t p : cgroup_->processes()) {
    if (::getpgid(p) != pid_) ::kill(p, signo);  // (the group has it already)
  }
}

}  // namespace ddprun::agent
