#pragma once
// One worker process: spawned into its own process group, bound to the agent's life, its exit
// observed as an event on the agent's io_context (a pidfd becomes readable), never by polling.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "ddprun/agent/environment.hpp"
#include "ddprun/agent/worker_cgroup.hpp"

namespace ddprun::agent {

// Where a worker's stdout or stderr goes.
struct StreamTarget {
  enum class Kind { kInherit, kFile, kPipe, kDevNull };
  Kind kind = Kind::kInherit;
  std::string path;  // kFile: created or truncated
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  Environment env;
  StreamTarget out;
  StreamTarget err;
  bool stdin_pipe = false;  // true: stdin is a pipe the caller writes (take_stdin_pipe)
  std::vector<int> cpus;    // the CPUs it may run on (sched_setaffinity before exec); empty: all
  // The agent and what it starts (a debugger reading a hung worker's stacks) may attach to it
  // where the kernel restricts ptrace to ancestors (Yama's ptrace_scope 1): PR_SET_PTRACER.
  bool debuggable = false;
  // A descriptor the child gets as its fd 3 (not close-on-exec there); -1: none.
  int pass_fd = -1;
};

// The descriptors a started worker takes as its stdin, stdout and stderr, and its cgroup's
// cgroup.procs (-1: none); the caller keeps and closes them.
struct ChildFds {
  int in = 0;
  int out = 1;
  int err = 2;
  int cgroup_procs = -1;
};

// Starts a worker some other way than fork and exec here (warm_interpreter.hpp). The worker must
// be set up as WorkerProcess sets up its child, with `fds`.
class ForkServer {
 public:
  virtual ~ForkServer() = default;
  // The pid of the started worker, a child of this process by the time this completes; nullopt:
  // not started (the caller starts it itself). The event loop runs meanwhile; `spec` outlives the
  // call.
  virtual boost::asio::awaitable<std::optional<pid_t>> start(const SpawnSpec& spec,
                                                             ChildFds fds) = 0;
};

struct ExitStatus {
  int code = 0;  // >= 0: exit status; < 0: killed by signal -code
  std::chrono::system_clock::time_point time;
  bool oom_killed = false;  // its cgroup says the kernel's OOM killer killed in it
};

class WorkerProcess {
 public:
  // Forks and execs. The child leads a new process group, moves into `cgroup` when given (before
  // exec: everything it starts is in it), and gets SIGKILL if the agent dies (PR_SET_PDEATHSIG,
  // checked against a race with the agent's death). Throws std::system_error when a pipe or fork
  // fails. An exec failure is not thrown: the process exits 127 and, once its exit is reported,
  // exec_error() says why.
  WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec,
                std::unique_ptr<WorkerCgroup> cgroup = nullptr);
  // Starts the worker through `server` where it can (spec.pass_fd is then not used), else as the
  // constructor does if `wanted()` still holds once the server answered (nullptr where not);
  // throws as the constructor does. The event loop runs while the server answers. `spec` outlives
  // the call.
  static boost::asio::awaitable<std::unique_ptr<WorkerProcess>> start(
      boost::asio::io_context& io, const SpawnSpec& spec, std::unique_ptr<WorkerCgroup> cgroup,
      ForkServer& server, std::function<bool()> wanted);
  // Kills the process group (and the cgroup) if the process is still running, and reaps it.
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Its cgroup's folder, or empty.
  std::string cgroup_path() const { return cgroup_ ? cgroup_->path() : std::string(); }
  bool running() const { return running_; }
  const std::string& exec_error() const { return exec_error_; }

  // Calls `on_exit` once, on the io_context, when the process has exited. Any process it left
  // behind in its group or cgroup is killed before the exit is reported: a worker's helpers never
  // outlive it.
  void watch_exit(std::function<void(const ExitStatus&)> on_exit);
  // Sends `signo` to the worker's process group, and to the processes of its cgroup that left the
  // group; a no-op once it has exited.
  void signal_group(int signo);
  // Reaps the process now if it has exited (on_exit is called before this returns), without
  // waiting for its exit to be noticed: whether it had.
  bool reap_if_exited();
  // Stops watching a process that survived SIGKILL (uninterruptible sleep): running() turns false
  // and it is never waited for (the destructor does not block on it); on_exit is not called.
  void abandon();

  // The read end of a kPipe stream (or -1). The caller takes ownership.
  int take_stdout_pipe() { return std::exchange(stdout_pipe_, -1); }
  int take_stderr_pipe() { return std::exchange(stderr_pipe_, -1); }
  // The write end of the stdin pipe (or -1). The caller takes ownership.
  int take_stdin_pipe() { return std::exchange(stdin_pipe_, -1); }

 private:
  struct Streams;  // the descriptors made for the child before it starts (worker_process.cpp)
  // Starts the worker (forks and execs unless `served`: the pid a server started) with `streams`.
  WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec,
                std::unique_ptr<WorkerCgroup> cgroup, Streams streams, std::optional<pid_t> served);

  // Waits for the pidfd to turn readable, and takes that for the exit only once the kernel
  // confirms it: Asio may report readiness meant for another descriptor. A socket Asio opened and
  // closed stays in its epoll set while a child forked meanwhile holds it (until that child's
  // exec), and its events then reach whichever descriptor took over its bookkeeping.
  void await_exit();
  // Whether the process has exited (a zombie not yet reaped), without reaping it.
  bool exited() const;
  void reap(int wait_status);
  // Fills exec_error_ from the child's report pipe, once it has exited (it wrote an errno when its
  // CPU binding or exec failed; an exec that succeeded closed the pipe).
  void read_exec_report();

  pid_t pid_ = -1;
  bool running_ = false;
  std::string exec_error_;
  int report_fd_ = -1;
  std::string program_;
  std::vector<int> cpus_;
  int stdout_pipe_ = -1;
  int stderr_pipe_ = -1;
  int stdin_pipe_ = -1;
  boost::asio::posix::stream_descriptor pidfd_;
  std::function<void(const ExitStatus&)> on_exit_;
  std::unique_ptr<WorkerCgroup> cgroup_;
};

}  // namespace ddprun::agent
