#include "node/guardian.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>

#include <spdlog/spdlog.h>

#include "node/owned_folders.hpp"

namespace ddprun::agent {
namespace {

// One message, written whole (smaller than PIPE_BUF, so writes never interleave).
struct Record {
  // '+' a worker started, '-' it is gone, 'T' the cgroup tree, 'F' a folder to remove, 'E' the
  // entry of the workers' environment that marks their descendants, 'Q' the agent ends as it
  // should (it cleaned up itself: no search for the mark)
  char op;
  pid_t pgid;
  char cgroup[240];
};

constexpr int kMaxWorkers = 4096;
struct Entry {
  pid_t pgid;
  char cgroup[sizeof(Record::cgroup)];
};
// The guardian's table: static, so that nothing is allocated after fork().
Entry g_entries[kMaxWorkers];
char g_tree[sizeof(Record::cgroup)];
constexpr int kMaxFolders = 4;  // the agent's folders in memory (node/owned_folders.hpp)
char g_folders[kMaxFolders][sizeof(Record::cgroup)];
int g_folder_count = 0;
char g_marker[sizeof(Record::cgroup)];
// A process's environment, read a piece at a time, with the tail of the piece before.
char g_environ[1 << 16];

void copy_path(char* dst, const char* src) {
  size_t i = 0;
  for (; i + 1 < sizeof(Record::cgroup) && src[i] != '\0'; ++i) dst[i] = src[i];
  dst[i] = '\0';
}

// dst = a + "/" + b, within the record's path size; false if it does not fit.
bool join(char* dst, size_t size, const char* a, const char* b) {
  const size_t la = std::strlen(a), lb = std::strlen(b);
  if (la + 1 + lb + 1 > size) return false;
  std::memcpy(dst, a, la);
  dst[la] = '/';
  std::memcpy(dst + la + 1, b, lb + 1);
  return true;
}

bool populated(const char* cgroup) {
  char path[sizeof(Record::cgroup) + 32];
  if (!join(path, sizeof path, cgroup, "cgroup.events")) return false;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[256];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  const char* p = std::strstr(text, "populated ");
  return p != nullptr && p[10] == '1';
}

void kill_cgroup(const char* cgroup) {
  char path[sizeof(Record::cgroup) + 32];
  if (!join(path, sizeof path, cgroup, "cgroup.kill")) return;
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  [[maybe_unused]] auto n = ::write(fd, "1", 1);
  ::close(fd);
}

// Whether the process whose /proc entry is `pid` began with g_marker in its environment: the
// entry, between the NULs that separate entries (the file's start counting as one).
bool marked(const char* pid) {
  char dir[32];
  char path[64];
  if (!join(dir, sizeof dir, "/proc", pid) || !join(path, sizeof path, dir, "environ")) {
    return false;
  }
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t m = std::strlen(g_marker);
  size_t kept = 1;  // the NUL before the first entry
  g_environ[0] = '\0';
  bool found = false;
  for (;;) {
    const ssize_t n = ::read(fd, g_environ + kept, sizeof g_environ - kept);
    if (n <= 0) break;
    const size_t end = kept + static_cast<size_t>(n);
    for (size_t i = 0; !found && i + m + 1 < end; ++i) {
      found = g_environ[i] == '\0' && g_environ[i + m + 1] == '\0' &&
              std::memcmp(g_environ + i + 1, g_marker, m) == 0;
    }
    if (found) break;
    kept = end < m + 1 ? end : m + 1;  // a match may begin in this piece and end in the next
    std::memmove(g_environ, g_environ + end - kept, kept);
  }
  ::close(fd);
  return found;
}

// Calls visit(name, type) for each entry of the folder open as `dir`, "." and ".." too (getdents64
// into a buffer on the stack: nothing allocated); returns whether it could list them all.
template <typename Visit>
bool for_each_entry(int dir, Visit visit) {
  alignas(8) char buffer[4096];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir, buffer, sizeof buffer);
    if (n <= 0) return n == 0;
    for (long at = 0; at < n;) {
      struct Entry64 {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const auto* e = reinterpret_cast<const Entry64*>(buffer + at);
      at += e->reclen;
      visit(e->name, e->type);
    }
  }
}

// SIGKILLs every process that began with g_marker in its environment: what the workers started
// and left their process group and cgroup (setsid, double forks), orphaned or not; passes until
// one finds none (a process may fork while it is killed), 20 at most.
void kill_marked() {
  if (g_marker[0] == '\0') return;
  const pid_t self = ::getpid();
  for (int pass = 0; pass < 20; ++pass) {
    const int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return;
    int found = 0;
    for_each_entry(dir, [&](const char* name, unsigned char) {
      pid_t pid = 0;
      const char* c = name;
      for (; *c >= '0' && *c <= '9' && pid < 100'000'000; ++c) pid = pid * 10 + (*c - '0');
      if (*c != '\0' || pid <= 0 || pid == self || !marked(name)) return;
      ::kill(pid, SIGKILL);
      ++found;
    });
    ::close(dir);
    if (found == 0) return;
    const timespec ms5{0, 5'000'000};  // for those killed to exit (a zombie's environment is empty)
    ::nanosleep(&ms5, nullptr);
  }
}

// Whether an unlink went, or something else removed the entry first (another agent's clean-up).
bool gone(int result) { return result == 0 || errno == ENOENT; }

// Removes what the folder open as `dir` holds but the entry named `keep` (null: none),
// subfolders `depth` levels down; returns whether all of it went.
bool empty_folder(int dir, int depth, const char* keep = nullptr) {
  bool emptied = true;
  const bool listed = for_each_entry(dir, [&](const char* name, unsigned char type) {
    if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) return;
    if (keep != nullptr && std::strcmp(name, keep) == 0) return;
    if (type == DT_DIR) {
      const int sub = depth > 0 ? ::openat(dir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
      if (sub >= 0) {
        empty_folder(sub, depth - 1);
        ::close(sub);
      }
      emptied = gone(::unlinkat(dir, name, AT_REMOVEDIR)) && emptied;
    } else {
      emptied = gone(::unlinkat(dir, name, 0)) && emptied;
    }
  });
  return listed && emptied;
}

// Removes `folder` and what it holds (up to 3 levels of subfolders), its owner file last: where
// anything else stays, so do the owner file and the folder, and where something came into it
// meanwhile, the owner file is written back (node/owned_folders.hpp).
void remove_folder(const char* folder) {
  const int dir = ::open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  if (!empty_folder(dir, 3, kOwnerFile)) {
    ::close(dir);
    return;
  }
  char owner[256];
  long owner_bytes = -1;
  if (const int fd = ::openat(dir, kOwnerFile, O_RDONLY | O_CLOEXEC); fd >= 0) {
    owner_bytes = ::read(fd, owner, sizeof owner);
    ::close(fd);
  }
  ::unlinkat(dir, kOwnerFile, 0);
  if (::rmdir(folder) != 0 && errno == ENOTEMPTY && owner_bytes > 0) {
    const int fd = ::openat(dir, kOwnerFile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      [[maybe_unused]] const ssize_t written = ::write(fd, owner, owner_bytes);
      ::close(fd);
    }
  }
  ::close(dir);
}

// Makes every DDPRUN_CONTAINED_ entry of this process's own environment (the bytes
// /proc/self/environ shows) unlike any mark: a guardian of a ddprun run as a worker of another is
// not killed by that one's guardian before it has cleaned up after its own agent.
void unmark_self() {
  constexpr char kPrefix[] = "DDPRUN_CONTAINED_";
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, kPrefix, sizeof kPrefix - 1) == 0) (*e)[0] = '_';
  }
}

[[noreturn]] void guard(int fd) {
  unmark_self();
  bool quit = false;  // the agent said it ends as it should
  int count = 0;
  for (;;) {
    Record r;
    size_t got = 0;
    while (got < sizeof r) {
      const ssize_t n = ::read(fd, reinterpret_cast<char*>(&r) + got, sizeof r - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got < sizeof r) break;  // the agent is gone
    if (r.op == 'Q') {
      quit = true;
    } else if (r.op == 'T') {
      copy_path(g_tree, r.cgroup);
    } else if (r.op == 'F' && g_folder_count < kMaxFolders) {
      copy_path(g_folders[g_folder_count++], r.cgroup);
    } else if (r.op == 'E') {
      copy_path(g_marker, r.cgroup);
    } else if (r.op == '+' && count < kMaxWorkers) {
      g_entries[count].pgid = r.pgid;
      copy_path(g_entries[count].cgroup, r.cgroup);
      ++count;
    } else if (r.op == '-') {
      for (int i = 0; i < count; ++i) {
        if (g_entries[i].pgid != r.pgid) continue;
        g_entries[i] = g_entries[--count];
        break;
      }
    }
  }
  // Bounded, whatever it meets (a read of a process's environment waits on that process's
  // memory, which a process stuck in the kernel can hold): the default SIGALRM ends the guardian.
  ::signal(SIGALRM, SIG_DFL);
  ::alarm(30);
  for (int i = 0; i < count; ++i) {
    ::kill(-g_entries[i].pgid, SIGKILL);
    if (g_entries[i].cgroup[0] != '\0') kill_cgroup(g_entries[i].cgroup);
  }
  if (!quit) kill_marked();
  // Cgroups can be removed once the kernel has emptied them: bounded, 2 s at most.
  for (int i = 0; i < count; ++i) {
    if (g_entries[i].cgroup[0] == '\0') continue;
    for (int tries = 0; tries < 400 && populated(g_entries[i].cgroup); ++tries) {
      const timespec ms5{0, 5'000'000};
      ::nanosleep(&ms5, nullptr);
    }
    ::rmdir(g_entries[i].cgroup);
  }
  if (g_tree[0] != '\0') ::rmdir(g_tree);
  for (int i = 0; i < g_folder_count; ++i) remove_folder(g_folders[i]);
  ::_exit(0);
}

}  // namespace

std::unique_ptr<Guardian> Guardian::start(const std::string& cgroup_tree) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    spdlog::warn("no guardian for a SIGKILL of ddprun (pipe: {})", std::strerror(errno));
    return nullptr;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    spdlog::warn("no guardian for a SIGKILL of ddprun (fork: {})", std::strerror(errno));
    ::close(p[0]);
    ::close(p[1]);
    return nullptr;
  }
  if (pid == 0) {
    // Out of ddprun's process group (a signal to that group is not for the guardian), deaf to the
    // signals ddprun forwards, holding nothing of ddprun's but the pipe.
    ::setpgid(0, 0);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2})
      ::signal(s, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int null = ::open("/dev/null", O_RDWR);
    for (int target = 0; target < 3; ++target) ::dup2(null, target);
    ::dup2(p[0], 3);
    ::syscall(SYS_close_range, 4U, ~0U, 0U);
    guard(3);
  }
  ::close(p[0]);
  auto g = std::unique_ptr<Guardian>(new Guardian(p[1], pid));
  if (!cgroup_tree.empty()) {
    Record r{};
    r.op = 'T';
    copy_path(r.cgroup, cgroup_tree.c_str());
    [[maybe_unused]] auto n = ::write(g->fd_, &r, sizeof r);
  }
  return g;
}

Guardian::~Guardian() {
  Record r{};
  r.op = 'Q';  // this agent cleaned up itself
  [[maybe_unused]] auto n = ::write(fd_, &r, sizeof r);
  ::close(fd_);
  // It exits at once (nothing is listed by now); bounded all the same: one that does not is left
  // to exit on its own (its own alarm ends it), and to whoever adopts it.
  for (int tries = 0; tries < 500; ++tries) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != 0) return;
    const timespec ms10{0, 10'000'000};
    ::nanosleep(&ms10, nullptr);
  }
  spdlog::warn("ddprun's guardian (pid {}) did not exit within 5 s; left to end on its own", pid_);
}

void Guardian::track(pid_t pgid, const std::string& cgroup) {
  Record r{};
  r.op = '+';
  r.pgid = pgid;
  if (cgroup.size() < sizeof r.cgroup) copy_path(r.cgroup, cgroup.c_str());
  [[maybe_unused]] auto n = ::write(fd_, &r, sizeof r);
}

bool Guardian::remove_at_end(const std::string& folder) {
  if (folder.size() >= sizeof(Record::cgroup)) return false;
  Record r{};
  r.op = 'F';
  copy_path(r.cgroup, folder.c_str());
  return ::write(fd_, &r, sizeof r) == static_cast<ssize_t>(sizeof r);
}

bool Guardian::mark(const std::string& entry) {
  if (entry.size() >= sizeof(Record::cgroup)) return false;
  Record r{};
  r.op = 'E';
  copy_path(r.cgroup, entry.c_str());
  return ::write(fd_, &r, sizeof r) == static_cast<ssize_t>(sizeof r);
}

void Guardian::untrack(pid_t pgid) {
  Record r{};
  r.op = '-';
  r.pgid = pgid;
  [[maybe_unused]] auto n = ::write(fd_, &r, sizeof r);
}

}  // namespace ddprun::agent
