#include "ddprun/launcher/head_node.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/agent/console.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/agent/worker_process.hpp"
#include "ddprun/launcher/remote_command.hpp"
#include "host_output.hpp"

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

}  // namespace

int run_head_node(const LaunchConfig& c, const agent::Environment& env) {
  EnvList forwarded;
  try {
    forwarded = forwarded_environment(c, env, env_files(env));
  } catch (const std::invalid_argument& e) {
    std::cerr << "ddprun: error: " << e.what() << std::endl;
    return kExitUsage;
  }
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  const std::string cwd = fs::current_path().string();

  std::string layout;
  for (size_t i = 0; i < c.hosts.size(); ++i) {
    layout += fmt::format("{}{} ({})", i ? ", " : "", c.hosts[i].host, host_nproc(c, i));
  }
  spdlog::info("head: run {} on {} hosts: {}; the first host's agent holds the store at {}:{}",
               c.rdzv_id, c.hosts.size(), layout, c.master_addr, c.master_port.value_or(0));

  asio::io_context io(1);
  std::vector<HostRun> hosts(c.hosts.size());
  size_t running = 0, open_outputs = 0;
  bool all_ready = false;
  int signaled = 0;
  bool stopping = false;
  asio::steady_timer give_up(io);
  const auto stop_all = [&](int signo) {
    for (auto& h : hosts) send_control(h, signo);
    if (stopping) return;
    stopping = true;
    // The agents stop their workers within the shutdown timeout; an ssh still open well after
    // that is closed, which ends its agent too.
    give_up.expires_after(std::chrono::seconds(c.shutdown_timeout.value_or(30) + 15));
    give_up.async_wait([&](auto e) {
      if (e) return;
      spdlog::warn("head: closing the ssh connections still open");
      for (auto& h : hosts) {
        if (!h.code) h.ssh->signal_group(SIGTERM);
      }
    });
  };
  for (size_t i = 0; i < c.hosts.size(); ++i) {
    HostRun& h = hosts[i];
    h.host = c.hosts[i].host;
    agent::SpawnSpec spec;
    spec.argv = ssh_command(
        c, h.host,
        host_command(self, remote_shell_command(cwd, forwarded, self, agent_arguments(c, i))),
        kConnectTimeoutS);
    spec.env = env;
    spec.out = {agent::StreamTarget::Kind::kPipe, {}};
    spec.err = {agent::StreamTarget::Kind::kPipe, {}};
    spec.stdin_pipe = true;
    h.ssh = std::make_unique<agent::WorkerProcess>(io, spec);
    h.control = h.ssh->take_stdin_pipe();
    ::fcntl(h.control, F_SETFL, ::fcntl(h.control, F_GETFL) | O_NONBLOCK);
    const std::string prefix = h.host + ": ";
    h.out = std::make_shared<HostOutput>(io, h.ssh->take_stdout_pipe(), STDOUT_FILENO, prefix);
    h.err = std::make_shared<HostOutput>(io, h.ssh->take_stderr_pipe(), STDERR_FILENO, prefix);
    open_outputs += 2;
    h.out->start([&] { --open_outputs; },
                 [&, i] {
                   hosts[i].ready = true;
                   if (all_ready) {  // (a late host after the wait below has given up on it)
                     hosts[i].out->release();
                     hosts[i].err->release();
                   }
                 });
    h.err->start([&] { --open_outputs; });
    ++running;
    h.ssh->watch_exit([&, i](const agent::ExitStatus& s) {
      HostRun& me = hosts[i];
      me.code = s.code;
      --running;
      ::close(std::exchange(me.control, -1));
      if (s.code != 0 && s.code != 1 && !stopping && running > 0 && all_ready) {
        spdlog::warn("head: {}'s agent ended with {}: stopping the other hosts", me.host,
                     exit_text(s.code));
        stop_all(SIGTERM);
      }
    });
  }

  asio::signal_set signals(io);
  for (int s : agent::parse_signal_list(c.signals_to_handle)) signals.add(s);
  std::function<void()> listen = [&] {
    signals.async_wait([&](boost::system::error_code e, int signo) {
      if (e) return;
      if (signaled != 0) {
        spdlog::warn("head: received {} again: closing every ssh connection now",
                     agent::signal_name(signo));
        for (auto& h : hosts) {
          if (!h.code) h.ssh->signal_group(SIGTERM);
        }
      } else {
        spdlog::warn("head: received {}: forwarding it to every host's agent",
                     agent::signal_name(signo));
        signaled = signo;
        stop_all(signo);
      }
      listen();
    });
  };
  listen();
  // Every host ready, or one failed for good: ssh gave up (its connect timeout), or the deadline.
  asio::steady_timer deadline(io, std::chrono::seconds(kConnectTimeoutS + 5));
  bool timed_out = false;
  deadline.async_wait([&](auto e) {
    if (!e) timed_out = true;
  });
  const auto settled = [&] {
    for (const auto& h : hosts) {
      if (!h.ready && !h.code) return false;
    }
    return true;
  };
  while (!settled() && !timed_out && signaled == 0) io.run_one();
  deadline.cancel();
  std::vector<std::string> unusable;
  for (auto& h : hosts) {
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
  if (!unusable.empty() && signaled == 0) {
    // The ready hosts' agents wait for the missing ones in the rendezvous: no worker has started.
    stopping = true;
    for (auto& h : hosts) {
      send_control(h, SIGTERM);
      if (!h.ready && !h.code) h.ssh->signal_group(SIGTERM);
    }
    asio::steady_timer bound(io, std::chrono::seconds(10));
    bool gave_up = false;
    bound.async_wait([&](auto e) {
      if (!e) gave_up = true;
    });
    while (running > 0 && !gave_up) io.run_one();
    for (auto& h : hosts) {
      if (!h.code) h.ssh->signal_group(SIGKILL);
    }
    while (running > 0) io.run_one();
    std::string text = fmt::format("ddprun: error: {} of {} hosts cannot be used:\n",
                                   unusable.size(), hosts.size());
    for (const auto& u : unusable) text += u;
    std::cerr << text << std::flush;
    return kExitLaunchError;
  }
  all_ready = true;
  for (auto& h : hosts) {
    h.out->release();
    h.err->release();
  }
  while (running > 0) io.run_one();
  signals.cancel();
  give_up.cancel();
  // What the agents wrote last arrives after their exit: bounded, in case a host's stream stays
  // open (a process that inherited it).
  asio::steady_timer drain(io, std::chrono::seconds(5));
  bool drained = false;
  drain.async_wait([&](auto) { drained = true; });
  while (open_outputs > 0 && !drained) io.run_one();
  agent::Console::of(STDOUT_FILENO).flush();
  agent::Console::of(STDERR_FILENO).flush();

  if (signaled != 0) return 128 + signaled;
  std::vector<std::string> summaries;
  std::vector<std::string> failed;
  bool job_failed = false;
  for (const auto& h : hosts) {
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
  text += fmt::format("ddprun: the job failed on {} of {} hosts:\n", failed.size(), hosts.size());
  for (const auto& f : failed) text += f + "\n";
  std::cerr << text << std::flush;
  return job_failed ? kExitWorkerFailure : kExitLaunchError;
}

}  // namespace ddprun::launcher
