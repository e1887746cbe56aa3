#include "head_node.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/agent/console.hpp"
#include "ddprun/agent/signal_listener.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/agent/worker_process.hpp"
#include "host_output.hpp"
#include "remote_command.hpp"

namespace ddprun::launcher {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

constexpr int kConnectTimeoutS = 10;

// The .ddprun_env files: home's, then the current folder's (later lines win).
EnvList env_files(const agent::Environment& env) {
  EnvList out;
  std::vector<fs::path> files;
  if (auto home = env.find("HOME"); home != env.end()) files.push_back(fs::path(home->second));
  files.push_back(fs::current_path());
  for (auto& dir : files) {
    const fs::path file = dir / ".ddprun_env";
    std::ifstream in(file);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    for (auto& kv : parse_env_file(text.str(), file.string())) out.push_back(std::move(kv));
  }
  return out;
}

std::string exit_text(int code) {
  return code >= 0 ? fmt::format("exit status {}", code)
                   : fmt::format("killed by {}", agent::signal_name(-code));
}

struct HostRun {
  std::string host;
  std::unique_ptr<agent::WorkerProcess> ssh;
  int control = -1;    // ssh's stdin: the agent's control channel
  bool ready = false;  // ssh reached the host and ddprun is there
  std::optional<int> code;
  std::shared_ptr<HostOutput> out, err;
};

// The shell command of one host: ddprun must be at the head's path; then the ready line; then the
// agent.
std::string host_command(const std::string& ddprun_path, const std::string& agent_command) {
  return fmt::format(
      "test -x {0} || {{ echo 'ddprun is not at '{0}' on this host' >&2; exit 127; }}; "
      "echo {1}; {2}",
      shell_quote(ddprun_path), shell_quote(kReadyMarker), agent_command);
}

void send_control(HostRun& h, int signo) {
  if (h.control < 0 || h.code) return;
  const std::string line = agent::signal_name(signo) + "\n";
  [[maybe_unused]] auto n = ::write(h.control, line.data(), line.size());
}

// Runs the io_context until `done()` or, with a bound, until it has passed; false on the latter.
bool run_until(asio::io_context& io, const std::function<bool()>& done,
               std::optional<std::chrono::seconds> bound = std::nullopt) {
  asio::steady_timer timer(io);
  bool expired = false;
  if (bound) {
    timer.expires_after(*bound);
    timer.async_wait([&](auto e) {
      if (!e) expired = true;
    });
  }
  while (!done() && !expired) io.run_one();
  return !expired;  // (the timer's cancelled wait, run later, touches nothing)
}

// One head-node launch, start to exit status: start every host's ssh, wait until each is ready
// (or give the job up), relay until every agent has ended, then report.
class HeadNode {
 public:
  HeadNode(const LaunchConfig& c, const agent::Environment& env, EnvList forwarded)
      : c_(c), env_(env), forwarded_(std::move(forwarded)), hosts_(c.hosts.size()) {}

  int run() {
    std::error_code ec;
    const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
    const std::string cwd = fs::current_path().string();
    for (size_t i = 0; i < hosts_.size(); ++i) start_host(i, self, cwd);
    agent::SignalListener signals(io_, c_.signals, [this](int signo) { on_signal(signo); });
    // Every host ready, or one failed for good: ssh gave up (its connect timeout), or the deadline.
    run_until(
        io_, [this] { return settled() || signaled_ != 0; },
        std::chrono::seconds(kConnectTimeoutS + 5));
    if (const std::vector<std::string> unusable = unusable_hosts();
        !unusable.empty() && signaled_ == 0) {
      return give_up(unusable);
    }
    all_ready_ = true;
    for (auto& h : hosts_) {
      h.out->release();
      h.err->release();
    }
    run_until(io_, [this] { return running_ == 0; });
    signals.cancel();
    give_up_.cancel();
    // What the agents wrote last arrives after their exit: bounded, in case a host's stream stays
    // open (a process that inherited it).
    run_until(
        io_, [this] { return open_outputs_ == 0; }, std::chrono::seconds(5));
    agent::Console::of(STDOUT_FILENO).flush();
    agent::Console::of(STDERR_FILENO).flush();
    return signaled_ != 0 ? 128 + signaled_ : job_status();
  }

 private:
  void start_host(size_t i, const std::string& self, const std::string& cwd) {
    HostRun& h = hosts_[i];
    h.host = c_.hosts[i].host;
    agent::SpawnSpec spec;
    spec.argv = ssh_command(
        c_, h.host,
        host_command(self, remote_shell_command(cwd, forwarded_, self, agent_arguments(c_, i))),
        kConnectTimeoutS);
    spec.env = env_;
    spec.out = {agent::StreamTarget::Kind::kPipe, {}};
    spec.err = {agent::StreamTarget::Kind::kPipe, {}};
    spec.stdin_pipe = true;
    h.ssh = std::make_unique<agent::WorkerProcess>(io_, spec);
    h.control = h.ssh->take_stdin_pipe();
    ::fcntl(h.control, F_SETFL, ::fcntl(h.control, F_GETFL) | O_NONBLOCK);
    const std::string prefix = h.host + ": ";
    h.out = std::make_shared<HostOutput>(io_, h.ssh->take_stdout_pipe(), STDOUT_FILENO, prefix);
    h.err = std::make_shared<HostOutput>(io_, h.ssh->take_stderr_pipe(), STDERR_FILENO, prefix);
    open_outputs_ += 2;
    h.out->start([this] { --open_outputs_; },
                 [this, i] {
                   hosts_[i].ready = true;
                   if (all_ready_) {  // (a late host after the wait for all has given up on it)
                     hosts_[i].out->release();
                     hosts_[i].err->release();
                   }
                 });
    h.err->start([this] { --open_outputs_; });
    ++running_;
    h.ssh->watch_exit([this, i](const agent::ExitStatus& s) { on_host_exit(hosts_[i], s); });
  }

  void on_host_exit(HostRun& h, const agent::ExitStatus& s) {
    h.code = s.code;
    --running_;
    ::close(std::exchange(h.control, -1));
    if (s.code != 0 && s.code != 1 && !stopping_ && running_ > 0 && all_ready_) {
      spdlog::warn("head: {}'s agent ended with {}: stopping the other hosts", h.host,
                   exit_text(s.code));
      stop_all(SIGTERM);
    }
  }

  void on_signal(int signo) {
    if (signaled_ != 0) {
      spdlog::warn("head: received {} again: closing every ssh connection now",
                   agent::signal_name(signo));
      close_ssh(SIGTERM);
      return;
    }
    spdlog::warn("head: received {}: forwarding it to every host's agent",
                 agent::signal_name(signo));
    signaled_ = signo;
    stop_all(signo);
  }

  // Passes `signo` to every agent. The agents stop their workers within the shutdown timeout; an
  // ssh still open well after that is closed, which ends its agent too.
  void stop_all(int signo) {
    for (auto& h : hosts_) send_control(h, signo);
    if (std::exchange(stopping_, true)) return;
    give_up_.expires_after(c_.shutdown_timeout + std::chrono::seconds(15));
    give_up_.async_wait([this](auto e) {
      if (e) return;
      spdlog::warn("head: closing the ssh connections still open");
      close_ssh(SIGTERM);
    });
  }

  // Signals the process group of every ssh still running.
  void close_ssh(int signo) {
    for (auto& h : hosts_) {
      if (!h.code) h.ssh->signal_group(signo);
    }
  }

  bool settled() const {
    return std::all_of(hosts_.begin(), hosts_.end(),
                       [](const HostRun& h) { return h.ready || h.code; });
  }

  // A line for each host that did not become ready, with ssh's reason.
  std::vector<std::string> unusable_hosts() const {
    std::vector<std::string> unusable;
    for (const auto& h : hosts_) {
      if (h.ready) continue;
      std::string why = h.ssh->exec_error().empty() ? h.err->last_line() : h.ssh->exec_error();
      if (!h.code) {
        why = fmt::format("no answer within {} s{}", kConnectTimeoutS + 5,
                          why.empty() ? "" : " (" + why + ")");
      } else if (why.empty()) {
        why = fmt::format("ssh: {}", exit_text(*h.code));
      }
      unusable.push_back(fmt::format("  {}: {}\n", h.host, why));
    }
    return unusable;
  }

  // Some host cannot be used: the ready hosts' agents wait for the missing ones in the rendezvous
  // (no worker has started). All are stopped (bounded), and the hosts are reported.
  int give_up(const std::vector<std::string>& unusable) {
    stopping_ = true;
    for (auto& h : hosts_) {
      send_control(h, SIGTERM);
      if (!h.ready && !h.code) h.ssh->signal_group(SIGTERM);
    }
    run_until(
        io_, [this] { return running_ == 0; }, std::chrono::seconds(10));
    close_ssh(SIGKILL);
    run_until(io_, [this] { return running_ == 0; });
    std::string text = fmt::format("ddprun: error: {} of {} hosts cannot be used:\n",
                                   unusable.size(), hosts_.size());
    for (const auto& u : unusable) text += u;
    std::cerr << text << std::flush;
    return kExitLaunchError;
  }

  // Every agent has ended: the job's status, with the failure summary printed once.
  int job_status() const {
    std::vector<std::string> summaries;
    std::vector<std::string> failed;
    bool job_failed = false;
    for (const auto& h : hosts_) {
      for (const auto& s : h.err->summaries()) {
        if (std::find(summaries.begin(), summaries.end(), s) == summaries.end()) {
          summaries.push_back(s);
        }
      }
      if (*h.code == 1) job_failed = true;
      if (*h.code != 0) failed.push_back(fmt::format("  {}: {}", h.host, exit_text(*h.code)));
    }
    if (failed.empty()) return kExitSuccess;
    std::string text;
    for (const auto& s : summaries) text += s;
    text +=
        fmt::format("ddprun: the job failed on {} of {} hosts:\n", failed.size(), hosts_.size());
    for (const auto& f : failed) text += f + "\n";
    std::cerr << text << std::flush;
    return job_failed ? kExitWorkerFailure : kExitLaunchError;
  }

  const LaunchConfig& c_;
  const agent::Environment& env_;
  const EnvList forwarded_;
  asio::io_context io_{1};
  std::vector<HostRun> hosts_;
  size_t running_ = 0;
  size_t open_outputs_ = 0;
  bool all_ready_ = false;
  int signaled_ = 0;
  bool stopping_ = false;
  asio::steady_timer give_up_{io_};
};

}  // namespace

int run_head_node(const LaunchConfig& c, const agent::Environment& env) {
  EnvList forwarded;
  try {
    forwarded = forwarded_environment(c, env, env_files(env));
  } catch (const std::invalid_argument& e) {
    std::cerr << "ddprun: error: " << e.what() << std::endl;
    return kExitUsage;
  }
  std::string layout;
  for (size_t i = 0; i < c.hosts.size(); ++i) {
    layout += fmt::format("{}{} ({})", i ? ", " : "", c.hosts[i].host, host_nproc(c, i));
  }
  spdlog::info("head: run {} on {} hosts: {}; the first host's agent holds the store at {}:{}",
               c.rdzv.run_id, c.hosts.size(), layout, c.rdzv.endpoint_host, c.rdzv.store_port);
  return HeadNode(c, env, std::move(forwarded)).run();
}

}  // namespace ddprun::launcher
