#include "workers/child_start.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace ddprun::agent {
namespace {

// In the child: every descriptor from `first` on is closed by exec, as torchrun's workers get
// nothing of the agent's but their standard streams (subprocess's close_fds). Without it a worker
// would hold the agent's sockets (Asio opens them without close-on-exec) for its whole life: the
// store's listening port, connections the agent closed, other workers' pipes.
void close_on_exec_from(int first, const std::vector<int>& listed) {
  if (listed.empty()) {
    ::syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, CLOSE_RANGE_CLOEXEC);
    return;
  }
  for (int fd : listed) {
    if (fd >= first) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
}

// Whether the kernel marks a range of descriptors close-on-exec in one call; asked once, on an
// empty range.
bool kernel_marks_ranges() {
  static const bool yes = ::syscall(SYS_close_range, ~0U - 1, ~0U, CLOSE_RANGE_CLOEXEC) == 0;
  return yes;
}

// This process's open descriptors (empty only where /proc cannot be read).
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

// The child, from its creation to its exec. Not instrumented by the sanitizers: while it shares
// the agent's memory on a stack the sanitizers do not know, what they would mark on that stack
// would stay marked after the exec.
[[noreturn]] __attribute__((no_sanitize("address", "undefined"))) void run_child(
    const ChildPlan& plan) {
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction now {};
    if (::sigaction(s, nullptr, &now) == 0 && now.sa_handler != SIG_IGN &&
        now.sa_handler != SIG_DFL) {
      ::signal(s, SIG_DFL);
    }
  }
  // And those the agent ignores (SIGPIPE), which exec would keep ignored.
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) ::signal(s, SIG_DFL);
  ::setpgid(0, 0);
  if (plan.cgroup_procs >= 0 && !plan.in_cgroup) {
    [[maybe_unused]] auto moved = ::write(plan.cgroup_procs, "0", 1);  // this process, into it
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != plan.parent) ::_exit(1);
  // (The agent died before PR_SET_PDEATHSIG took effect.) PR_SET_PTRACER fails harmlessly
  // without Yama.
  if (plan.debuggable) ::prctl(PR_SET_PTRACER, plan.parent, 0, 0, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (plan.bind && ::sched_setaffinity(0, sizeof plan.cpus, &plan.cpus) != 0) {
    const int e = -errno;  // negative: the binding failed, not the exec
    [[maybe_unused]] auto n = ::write(plan.report_fd, &e, sizeof e);
    ::_exit(127);
  }
  if (plan.in_fd >= 0) ::dup2(plan.in_fd, STDIN_FILENO);
  if (plan.out_fd >= 0) ::dup2(plan.out_fd, STDOUT_FILENO);
  if (plan.err_fd >= 0) ::dup2(plan.err_fd, STDERR_FILENO);
  if (plan.pass_fd >= 0) {
    if (plan.pass_fd == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else {
      ::dup2(plan.pass_fd, 3);
    }
  }
  close_on_exec_from(plan.pass_fd >= 0 ? 4 : 3, plan.listed);
  ::execvpe(plan.argv[0], plan.argv, plan.envp);
  const int e = errno;
  [[maybe_unused]] auto n = ::write(plan.report_fd, &e, sizeof e);
  ::_exit(127);
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

#if defined(__x86_64__)
// (Not instrumented either: ASan would mark the call to a function that does not return.)
__attribute__((no_sanitize("address", "undefined"))) int child_entry(void* plan) {
  run_child(*static_cast<const ChildPlan*>(plan));
}

// clone3 whose child starts on the stack `args` names by calling fn(arg), and never comes back
// here. glibc has no clone3 of its own, and the system call alone would return into this frame on
// a stack that does not hold it. The kernel keeps every register but rax, rcx and r11.
__attribute__((noinline)) long clone3_calling(clone_args* args, int (*fn)(void*), void* arg) {
  long ret = SYS_clone3;
  register int (*entry)(void*) asm("r8") = fn;
  register void* entry_arg asm("r9") = arg;
  asm volatile(
      "syscall\n\t"
      "testq %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xorl %%ebp, %%ebp\n\t"
      "movq %%r9, %%rdi\n\t"
      "callq *%%r8\n\t"
      "movl %%eax, %%edi\n\t"
      "movl %[exit], %%eax\n\t"
      "syscall\n\t"
      "ud2\n"
      "1:"
      : "+a"(ret)
      : "D"(args), "S"(sizeof *args), "r"(entry), "r"(entry_arg), [exit] "i"(SYS_exit)
      : "rcx", "r11", "memory", "cc");
  return ret;
}

// A stack for a child that shares this process's memory until its exec, with a guard page below
// it; unmapped when it goes out of scope (the child has exec'd or ended by then).
class ChildStack {
 public:
  // execvpe builds on its stack a path of `path_bytes` and, for a script without #!, an argv of
  // `argv_count` + 2 pointers.
  ChildStack(size_t argv_count, size_t path_bytes) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t need = (64 << 10) + path_bytes + (argv_count + 3) * sizeof(char*);
    size_ = (need + page - 1) / page * page + page;
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return;
    base_ = static_cast<char*>(p);
    ::mprotect(base_, page, PROT_NONE);
  }
  ~ChildStack() {
    if (base_ != nullptr) ::munmap(base_, size_);
  }
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
  char* base() const { return base_; }
  size_t size() const { return size_; }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
};

// The child shares this process's memory and the caller waits until it has exec'd or ended;
// -1 (errno set) where the kernel refuses, and nothing was started.
pid_t start_sharing_memory(ChildPlan& plan) {
  size_t argc = 0;
  while (plan.argv[argc] != nullptr) ++argc;
  const char* path = std::getenv("PATH");  // (what execvpe searches)
  ChildStack stack(argc, (path ? std::strlen(path) : 0) + std::strlen(plan.argv[0]) + 2);
  if (stack.base() == nullptr) return -1;
  clone_args args{};
  args.flags = CLONE_VM | CLONE_VFORK;
  args.exit_signal = SIGCHLD;
  args.stack = reinterpret_cast<uintptr_t>(stack.base());
  args.stack_size = stack.size();  // the top, page aligned: 16-byte aligned at the call
  plan.in_cgroup = plan.cgroup_dir >= 0;
  if (plan.in_cgroup) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<__u64>(plan.cgroup_dir);
  }
  const long pid = clone3_calling(&args, child_entry, &plan);
  if (pid < 0) {
    errno = static_cast<int>(-pid);
    return -1;
  }
  return static_cast<pid_t>(pid);
}
#endif

pid_t start_blocked(ChildPlan& plan) {
#if defined(__x86_64__)
  if (const pid_t pid = start_sharing_memory(plan); pid >= 0) return pid;
#endif
  const pid_t pid = fork_into(plan.cgroup_dir, &plan.in_cgroup);
  if (pid == 0) run_child(plan);
  return pid;
}

}  // namespace

pid_t start_child(ChildPlan& plan) {
  plan.listed.clear();
  if (!kernel_marks_ranges()) plan.listed = open_descriptors();
  sigset_t all, before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);  // (it sets no errno)
  const pid_t pid = start_blocked(plan);
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return pid;
}

}  // namespace ddprun::agent
