// One attempt of the worker group with real processes: what interrupt() does before and during it,
// when on_stopping() is told; what a standby starts with.
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>

#include "node/containment.hpp"
#include "temp_folder.hpp"
#include "workers/standby_launch.hpp"
#include "workers/worker_group.hpp"

using namespace ddprun::agent;
using namespace std::chrono_literals;

namespace {

std::vector<WorkerLaunch> sleepers(int n) {
  std::vector<WorkerLaunch> out(n);
  for (int i = 0; i < n; ++i) {
    out[i].id.local_rank = out[i].id.rank = i;
    out[i].spawn.argv = {"/bin/sleep", "30"};
  }
  return out;
}

GroupResult run(boost::asio::io_context& io, WorkerGroup& group, std::vector<WorkerLaunch> l) {
  std::optional<GroupResult> result;
  boost::asio::co_spawn(io, group.run(std::move(l)), [&](std::exception_ptr e, GroupResult r) {
    if (e) std::rethrow_exception(e);
    result = std::move(r);
  });
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!result && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
  REQUIRE(result);
  return *result;
}

}  // namespace

TEST_CASE("worker group: an interruption before the workers start is kept, and none starts",
          "[agent]") {
  boost::asio::io_context io;
  Containment containment(io, false);
  WorkerGroup group(io, 5s, containment);
  group.interrupt();  // the round ended before run(): the watcher fired first
  const auto started = std::chrono::steady_clock::now();
  const GroupResult r = run(io, group, sleepers(2));
  CHECK(r.state == GroupResult::State::kInterrupted);
  CHECK(r.failures.empty());
  CHECK(std::chrono::steady_clock::now() - started < 1s);  // nothing was started and stopped
  CHECK_FALSE(group.active());
  // Kept for that one run only: the next attempt runs (and is interrupted while it runs).
  boost::asio::steady_timer later(io, 200ms);
  later.async_wait([&](boost::system::error_code) { group.interrupt(); });
  const GroupResult next = run(io, group, sleepers(1));
  CHECK(next.state == GroupResult::State::kInterrupted);
  CHECK(std::chrono::steady_clock::now() - started >= 200ms);
}

TEST_CASE(
    "worker group: that its workers begin to stop is told once per run, when the stop begins, and "
    "not where they all ended on their own",
    "[agent]") {
  boost::asio::io_context io;
  Containment containment(io, false);
  WorkerGroup group(io, 1s, containment);
  int told = 0;
  std::chrono::steady_clock::time_point told_at;
  group.on_stopping([&] {
    ++told;
    told_at = std::chrono::steady_clock::now();
  });
  // Rank 1 ignores SIGTERM, so the stop lasts the shutdown timeout (1 s); rank 0 fails once rank
  // 1 says so (within 10 s; a rank 0 failing before rank 1 started would start no rank 1).
  const ddprun::test::TempFolder dir("ddprun-worker-group-test");
  const std::string ready = (dir.path / "ready").string();
  std::vector<WorkerLaunch> failing = sleepers(2);
  failing[0].spawn.argv = {"/bin/sh", "-c",
                           "i=0; while [ ! -e " + ready +
                               " ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; exit 3"};
  failing[1].spawn.argv = {"/bin/sh", "-c", "trap '' TERM; touch " + ready + "; sleep 30"};
  const auto started = std::chrono::steady_clock::now();
  const GroupResult failed = run(io, group, std::move(failing));
  const auto ended = std::chrono::steady_clock::now();
  CHECK(failed.state == GroupResult::State::kFailed);
  CHECK(told == 1);
  CHECK(ended - started >= 1s);
  CHECK(told_at - started < ended - started - 500ms);  // at the stop's start, not its end
  // Workers that all succeed begin no stop.
  std::vector<WorkerLaunch> done = sleepers(2);
  for (WorkerLaunch& l : done) l.spawn.argv = {"/bin/true"};
  CHECK(run(io, group, std::move(done)).state == GroupResult::State::kSucceeded);
  CHECK(told == 1);
  // An interruption of the next run's workers is told once more.
  boost::asio::steady_timer later(io, 200ms);
  later.async_wait([&](boost::system::error_code) { group.interrupt(); });
  CHECK(run(io, group, sleepers(2)).state == GroupResult::State::kInterrupted);
  CHECK(told == 2);
}

TEST_CASE("attempt: its phase only moves forward, and the first of a stop's phases is its start",
          "[agent]") {
  const AttemptTimes::Time t0{std::chrono::seconds(100)};
  Attempt a;
  a.enter(AttemptPhase::kRunning, t0);
  CHECK_FALSE(a.stopping());
  CHECK_FALSE(a.times.failed);
  a.cause(StopReason::kHang);
  a.times.failed = t0 + 1s;  // the hang watch: when the most silent rank last made progress
  a.enter(AttemptPhase::kCapturing, t0 + 3s);
  a.cause(StopReason::kInterrupted);  // (a later cause is not the reason)
  a.enter(AttemptPhase::kStopping, t0 + 4s);
  a.enter(AttemptPhase::kCapturing, t0 + 5s);  // a late step of the capture: the stop stays
  CHECK(a.phase == AttemptPhase::kStopping);
  CHECK(a.reason == StopReason::kHang);
  CHECK(a.hang_declared());
  CHECK(a.stopping());
  CHECK(*a.times.stop_began == t0 + 3s);
  CHECK(*a.times.failed == t0 + 1s);
  a.enter(AttemptPhase::kDraining, t0 + 6s);
  a.enter(AttemptPhase::kKilling, t0 + 7s);  // a kill timer after every worker ended
  CHECK(a.phase == AttemptPhase::kDraining);
  // Workers that all ended on their own: draining is no stop.
  Attempt done;
  done.enter(AttemptPhase::kRunning, t0);
  done.enter(AttemptPhase::kDraining, t0 + 1s);
  CHECK_FALSE(done.stopping());
  CHECK_FALSE(done.times.failed);
}

TEST_CASE(
    "worker group: the user's stop after another node's interruption ends the attempt as "
    "stopped, with the signal, and a worker that ignores SIGTERM is killed",
    "[agent]") {
  boost::asio::io_context io;
  Containment containment(io, false);
  WorkerGroup group(io, 500ms, containment);
  std::vector<WorkerLaunch> l = sleepers(2);
  l[1].spawn.argv = {"/bin/sh", "-c", "trap '' TERM INT; sleep 30 & wait; wait"};
  const auto started = std::chrono::steady_clock::now();  // (before the timers' 200 ms start)
  boost::asio::steady_timer interrupt(io, 200ms), stop(io, 300ms);
  interrupt.async_wait([&](boost::system::error_code) { group.interrupt(); });
  stop.async_wait([&](boost::system::error_code) { group.stop(SIGINT); });
  const GroupResult r = run(io, group, std::move(l));
  CHECK(r.state == GroupResult::State::kStopped);
  CHECK(r.stop_signal == SIGINT);
  CHECK(r.failures.empty());  // (both were stopped by ddprun)
  CHECK_FALSE(r.hang);
  REQUIRE(r.times.stop_began);
  CHECK(*r.times.stop_began - started >= 200ms);
  CHECK(std::chrono::steady_clock::now() - started >= 700ms);  // the SIGTERM's grace, then SIGKILL
}

TEST_CASE(
    "worker process: a stop signal that comes before its exec never runs the agent's handlers",
    "[agent]") {
  boost::asio::io_context io;
  bool agent_signalled = false;
  boost::asio::signal_set agent_signals(io, SIGTERM);
  agent_signals.async_wait([&](boost::system::error_code ec, int) {
    if (!ec) agent_signalled = true;
  });
  // Each worker is stopped at once, often before its exec: the window the child must keep shut.
  for (int i = 0; i < 300 && !agent_signalled; ++i) {
    SpawnSpec spec;
    spec.argv = {"/bin/true"};
    WorkerProcess w(io, spec);
    w.signal_group(SIGTERM);
    bool exited = false;
    w.watch_exit([&](const ExitStatus&) { exited = true; });
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!exited && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
    REQUIRE(exited);
  }
  io.poll();
  CHECK_FALSE(agent_signalled);
}

TEST_CASE("worker process: an event meant for a socket the agent closed is not taken for its exit",
          "[agent]") {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  asio::io_context io;
  // A socket Asio opened itself (a store connection): closing it, Asio leaves its removal from
  // epoll to the kernel, which removes it only when no process holds it any more. A child forked
  // meanwhile holds it until its exec, and Asio hands the socket's bookkeeping to the next
  // descriptor it watches: the worker's pidfd.
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  tcp::socket server = acceptor.accept();
  client.async_wait(tcp::socket::wait_read, [](boost::system::error_code) {});
  io.poll();
  const pid_t holder = ::fork();
  REQUIRE(holder >= 0);
  if (holder == 0) {
    ::pause();
    ::_exit(0);
  }
  client.close();
  io.poll();  // the cancelled wait: then nothing is left to do, and the io_context stops
  io.restart();
  SpawnSpec spec;
  spec.argv = {"/bin/sleep", "30"};
  WorkerProcess w(io, spec);
  std::optional<ExitStatus> exit;
  w.watch_exit([&](const ExitStatus& s) { exit = s; });
  // An event on the closed socket, while the worker runs on.
  asio::write(server, asio::buffer("x", 1));
  for (int i = 0; i < 3; ++i) io.poll();
  CHECK_FALSE(exit);
  CHECK(w.running());
  CHECK(::kill(w.pid(), 0) == 0);
  // Its real exit is still reported.
  w.signal_group(SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!exit && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
  REQUIRE(exit);
  CHECK(exit->code == -SIGTERM);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
}

TEST_CASE("worker process: a worker inherits none of the agent's descriptors but the one passed",
          "[agent]") {
  boost::asio::io_context io;
  // Descriptors the agent holds without close-on-exec, as Asio opens its sockets.
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  int passed[2];
  REQUIRE(::pipe(passed) == 0);
  char listing[] = "/tmp/ddprun-fds-XXXXXX";
  ::close(::mkstemp(listing));
  SpawnSpec spec;
  // The worker's own descriptors, as it sees them after exec (ls, its child, opens more).
  spec.argv = {"/bin/sh", "-c", "ls /proc/$$/fd"};
  spec.out = {StreamTarget::Kind::kFile, listing};
  spec.pass_fd = passed[0];
  WorkerProcess w(io, spec);
  std::optional<ExitStatus> exit;
  w.watch_exit([&](const ExitStatus& s) { exit = s; });
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!exit && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
  REQUIRE(exit);
  REQUIRE(exit->code == 0);
  std::set<int> fds;
  std::ifstream in(listing);
  for (int fd; in >> fd;) fds.insert(fd);
  std::remove(listing);
  CHECK(fds == std::set<int>{0, 1, 2, 3});
  for (int fd : {pair[0], pair[1], passed[0], passed[1]}) ::close(fd);
}

#if defined(__x86_64__)
TEST_CASE("worker process: a worker has exec'd by the time its start returns", "[agent]") {
  // It shares the agent's memory until its exec, and the agent waits for that exec: no copy of the
  // agent's memory is ever made for it.
  boost::asio::io_context io;
  SpawnSpec spec;
  spec.argv = {"/bin/sleep", "5"};
  for (int i = 0; i < 8; ++i) {
    WorkerProcess w(io, spec);
    const auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(w.pid()) + "/exe");
    CHECK(exe == std::filesystem::canonical("/bin/sleep"));
  }
}
#endif

TEST_CASE("worker process: workers start where a seccomp profile refuses clone3", "[agent]") {
  // As container runtimes' default profiles did before clone3 was allowed: ENOSYS, and a plain
  // fork instead. In a child of the test, since a filter cannot be removed.
  const pid_t tester = ::fork();
  REQUIRE(tester >= 0);
  if (tester == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
      ::_exit(100);
    }
    if (::syscall(SYS_clone3, nullptr, 0) != -1 || errno != ENOSYS) ::_exit(101);
    boost::asio::io_context io;
    SpawnSpec spec;
    spec.argv = {"/bin/sh", "-c", "exit 7"};
    WorkerProcess w(io, spec);
    std::optional<ExitStatus> exit;
    w.watch_exit([&](const ExitStatus& s) { exit = s; });
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!exit && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
    ::_exit(exit ? exit->code : 102);
  }
  int status = 0;
  REQUIRE(::waitpid(tester, &status, 0) == tester);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
}

TEST_CASE("standby launch: a worker's command line and the node's environment, without its rank",
          "[agent]") {
  const std::filesystem::path attempt =
      std::filesystem::temp_directory_path() / ("standby_launch_test." + std::to_string(getpid()));
  WorkerLaunch worker;
  worker.id.local_rank = worker.id.rank = 3;
  worker.spawn.argv = {"python3", "-u", "train.py", "--lr=0.1"};
  worker.spawn.env = {{"PATH", "/usr/bin"},
                      {"RANK", "3"},
                      {"LOCAL_RANK", "3"},
                      {"WORLD_SIZE", "8"},
                      {"LOCAL_WORLD_SIZE", "4"},
                      {"CUDA_VISIBLE_DEVICES", "4,5,6,7"},
                      {"MASTER_ADDR", "10.0.0.1"},
                      {"MASTER_PORT", "29500"},
                      {"TORCHELASTIC_ERROR_FILE", (attempt / "3" / "error.json").string()},
                      {"DDPRUN_HEARTBEAT_FILE", "/dev/shm/hb/3"},
                      {"DDPRUN_INPROCESS_FILE", "/dev/shm/ip/inprocess.3"},
                      {"DDPRUN_CHECKPOINT_SLOT", "3"},
                      {"DDPRUN_CHECKPOINT_SLOTS", "4"},
                      {"DDPRUN_CHECKPOINT_DIR", "/dev/shm/regions"}};
  worker.spawn.cpus = {6, 7};
  worker.spawn.out = {StreamTarget::Kind::kPipe, {}};
  worker.tee_out.file = (attempt / "3" / "stdout.log").string();
  worker.tee_out.console_fd = 1;
  worker.spawn.err = {StreamTarget::Kind::kFile, (attempt / "3" / "stderr.log").string()};
  worker.prefix = "[default3]:";
  worker.error_file = (attempt / "3" / "error.json").string();

  const WorkerLaunch s = standby_launch(worker, 2, "/dev/shm/ip/standby.2", StandbyStream::kSame,
                                        StandbyStream::kSame);

  CHECK(s.id.local_rank == -1);
  CHECK(s.id.rank == -1);
  CHECK(s.spawn.argv == worker.spawn.argv);
  const Environment want = {{"PATH", "/usr/bin"},
                            {"LOCAL_WORLD_SIZE", "4"},
                            {"CUDA_VISIBLE_DEVICES", "4,5,6,7"},
                            {"DDPRUN_CHECKPOINT_DIR", "/dev/shm/regions"},
                            {"DDPRUN_INPROCESS_FILE", "/dev/shm/ip/standby.2"},
                            {"DDPRUN_STANDBY", "1"}};
  CHECK(s.spawn.env == want);
  CHECK(s.spawn.cpus.empty());
  // Its streams go as the worker's, to files of its own where the worker's go to files.
  CHECK(s.spawn.out.kind == StreamTarget::Kind::kPipe);
  CHECK(s.tee_out.file == (attempt / "standby2" / "stdout.log").string());
  CHECK(s.spawn.err.kind == StreamTarget::Kind::kFile);
  CHECK(s.spawn.err.path == (attempt / "standby2" / "stderr.log").string());
  CHECK(std::filesystem::is_directory(attempt / "standby2"));
  CHECK(console_route(s, false) == ConsoleRoute{1, "[standby2]:", nullptr});
  CHECK(console_route(s, true) == ConsoleRoute{});
  CHECK(s.error_file.empty());
  std::filesystem::remove_all(attempt);
}

TEST_CASE("standby launch: a standby's stream follows the workers' the way they all allow",
          "[agent]") {
  WorkerLaunch a, b;
  a.prefix = "[default0]:";
  b.prefix = "[default1]:";
  for (WorkerLaunch* w : {&a, &b}) {
    w->spawn.out = {StreamTarget::Kind::kPipe, {}};
    w->tee_out.console_fd = 1;
    w->spawn.err = {};  // a terminal
  }
  // The same but for the prefix, a terminal kept: as they go.
  CHECK(standby_stream({&a, &b}, false) == StandbyStream::kSame);
  CHECK(standby_stream({&a, &b}, true) == StandbyStream::kSame);
  const WorkerLaunch same =
      standby_launch(a, 0, "/dev/shm/ip/standby.0", StandbyStream::kSame, StandbyStream::kSame);
  CHECK(same.spawn.err.kind == StreamTarget::Kind::kInherit);
  CHECK(console_route(same, false) == ConsoleRoute{1, "[standby0]:", nullptr});
  // --local_ranks_filter=0: rank 1 shows nowhere; no files: through the agent, to follow.
  b.tee_out.console_fd = -1;
  b.spawn.err = {StreamTarget::Kind::kDevNull, {}};
  CHECK(standby_stream({&a, &b}, false) == StandbyStream::kThrough);
  CHECK(standby_stream({&a, &b}, true) == StandbyStream::kThrough);
  const WorkerLaunch through = standby_launch(a, 0, "/dev/shm/ip/standby.0",
                                              StandbyStream::kThrough, StandbyStream::kThrough);
  CHECK(through.spawn.err.kind == StreamTarget::Kind::kPipe);
  CHECK(console_route(through, true) == ConsoleRoute{2, "", nullptr});
  CHECK(through.tee_err.file.empty());
  // A file for one and not the other (a per-rank --tee): none can follow.
  b.tee_out.file = "/tmp/attempt_0/1/stdout.log";
  CHECK(standby_stream({&a, &b}, false) == StandbyStream::kNone);
}

TEST_CASE("standby launch: a worker's console routing is what its place gives a standby",
          "[agent]") {
  WorkerLaunch worker;
  worker.prefix = "[default1]:";
  worker.spawn.out = {StreamTarget::Kind::kPipe, {}};
  worker.tee_out.console_fd = 1;
  worker.tee_out.raw = true;  // (watched for hangs, printed as written)
  worker.spawn.err = {};      // a terminal: the agent's own stderr
  CHECK(console_route(worker, false) == ConsoleRoute{1, "", nullptr});
  CHECK(console_route(worker, true) == ConsoleRoute{2, "", nullptr});
  worker.tee_out.raw = false;
  worker.tee_out.console_fd = -1;  // filtered out (--local_ranks_filter)
  worker.spawn.err = {StreamTarget::Kind::kDevNull, {}};
  CHECK(console_route(worker, false) == ConsoleRoute{});
  CHECK(console_route(worker, true) == ConsoleRoute{});
}
