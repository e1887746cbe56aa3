#include "ddprun/agent/worker_process.hpp"

#include <fcntl.h>
#include <signal.h>
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

#include "node/reap_killed.hpp"
#include "workers/child_start.hpp"

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

cpu_set_t cpu_set_of(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  }
  return set;
}

// A pidfd of the new child `pid`; where none can be had, the child (and its cgroup) is killed and
// reaped before the error is thrown: no WorkerProcess will own it.
int pidfd_or_kill(pid_t pid, WorkerCgroup* cgroup) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) return pidfd;
  const int e = errno;
  ::kill(-pid, SIGKILL);
  if (cgroup != nullptr) cgroup->kill_all();
  reap_killed(pid);
  throw std::system_error(e, std::generic_category(), "pidfd_open");
}

}  // namespace

struct WorkerProcess::Streams {
  explicit Streams(const SpawnSpec& spec) : out(open_target(spec.out)), err(open_target(spec.err)) {
    if (!spec.stdin_pipe) return;
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("pipe2");
    in_read.reset(p[0]);
    in_write.reset(p[1]);
  }
  // What a fork server gives the child: its end of each stream, the agent's own where inherited.
  ChildFds child(const WorkerCgroup* cgroup) const {
    return ChildFds{in_read.get() >= 0 ? in_read.get() : STDIN_FILENO,
                    out.child.get() >= 0 ? out.child.get() : STDOUT_FILENO,
                    err.child.get() >= 0 ? err.child.get() : STDERR_FILENO,
                    cgroup ? cgroup->procs_fd() : -1};
  }

  StreamFds out;
  StreamFds err;
  UniqueFd in_read;
  UniqueFd in_write;
};

WorkerProcess::WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec,
                             std::unique_ptr<WorkerCgroup> cgroup)
    : WorkerProcess(io, spec, std::move(cgroup), Streams(spec), std::nullopt) {}

boost::asio::awaitable<std::unique_ptr<WorkerProcess>> WorkerProcess::start(
    boost::asio::io_context& io, const SpawnSpec& spec, std::unique_ptr<WorkerCgroup> cgroup,
    ForkServer& server, std::function<bool()> wanted) {
  Streams streams(spec);
  const std::optional<pid_t> served = co_await server.start(spec, streams.child(cgroup.get()));
  if (!served && !wanted()) co_return nullptr;
  co_return std::unique_ptr<WorkerProcess>(
      new WorkerProcess(io, spec, std::move(cgroup), std::move(streams), served));
}

WorkerProcess::WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec,
                             std::unique_ptr<WorkerCgroup> cgroup, Streams streams,
                             std::optional<pid_t> served)
    : pidfd_(io), cgroup_(std::move(cgroup)) {
  pid_t pid = served.value_or(-1);
  UniqueFd report_read;
  if (!served) {
    // Everything the child touches is prepared here (child_start.hpp).
    std::vector<char*> argv;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    int report_fds[2];
    if (::pipe2(report_fds, O_CLOEXEC) != 0) throw_errno("pipe2");
    report_read.reset(report_fds[0]);
    UniqueFd report_write(report_fds[1]);
    ChildPlan plan;
    plan.argv = argv.data();
    plan.envp = envp.data();
    plan.in_fd = streams.in_read.get();
    plan.out_fd = streams.out.child.get();
    plan.err_fd = streams.err.child.get();
    plan.pass_fd = spec.pass_fd;
    plan.cgroup_dir = cgroup_ ? cgroup_->dir_fd() : -1;
    plan.cgroup_procs = cgroup_ ? cgroup_->procs_fd() : -1;
    plan.parent = ::getpid();
    plan.debuggable = spec.debuggable;
    plan.bind = !spec.cpus.empty();
    plan.cpus = cpu_set_of(spec.cpus);
    plan.report_fd = report_write.get();
    pid = start_child(plan);
    if (pid < 0) throw_errno("fork");
    // Read when the process has exited: a forked child (where memory cannot be shared) may not
    // have reached its exec yet, and waiting for it would start the workers one after another.
    report_fd_ = report_read.release();
    program_ = spec.argv[0];
    cpus_ = spec.cpus;
  }
  // Also set from this side: a signal to the group may come before the child runs setpgid().
  ::setpgid(pid, pid);
  streams.out.child.reset();
  streams.err.child.reset();
  streams.in_read.reset();

  pidfd_.assign(pidfd_or_kill(pid, cgroup_.get()));
  pid_ = pid;
  running_ = true;
  stdout_pipe_ = streams.out.parent_read.release();
  stderr_pipe_ = streams.err.parent_read.release();
  stdin_pipe_ = streams.in_write.release();
}

WorkerProcess::~WorkerProcess() {
  if (running_) {
    ::kill(-pid_, SIGKILL);
    if (cgroup_) cgroup_->kill_all();
    reap_killed(pid_);
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
                      if (!reap_if_exited()) await_exit();
                    });
}

bool WorkerProcess::reap_if_exited() {
  if (!running_ || !exited()) return false;
  int status = 0;
  // The leader is a zombie until reaped, so its group id cannot be reused yet.
  ::kill(-pid_, SIGKILL);
  if (cgroup_) cgroup_->kill_all();
  if (::waitpid(pid_, &status, 0) == pid_) reap(status);
  return true;
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
