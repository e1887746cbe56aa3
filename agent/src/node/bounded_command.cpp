#include "node/bounded_command.hpp"

#include <csignal>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/agent/worker_process.hpp"

namespace ddprun::agent {
namespace {

constexpr auto kReapLimit = std::chrono::seconds(5);  // after SIGKILL

// The file's last non-blank line, at most 300 bytes of it.
std::string last_line_of_file(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  if (last.size() > 300) last = last.substr(last.size() - 300);
  return last;
}

}  // namespace

boost::asio::awaitable<std::optional<std::string>> run_bounded_command(
    boost::asio::io_context& io, Containment& containment, const std::string& command,
    std::chrono::milliseconds timeout, const Environment& env, const std::string& log_file) {
  namespace asio = boost::asio;
  // No braced initializer lists in this coroutine (docs/design.md).
  SpawnSpec spec;
  spec.argv.push_back("/bin/sh");
  spec.argv.push_back("-c");
  spec.argv.push_back("exec 2>&1\n" + command);
  spec.env = env;
  spec.out.kind = StreamTarget::Kind::kFile;
  spec.out.path = log_file;
  auto process = std::make_unique<WorkerProcess>(io, spec, containment.worker_cgroup());
  containment.started(process->pid(), process->cgroup_path());
  struct Done {
    explicit Done(asio::io_context& io) : wake(io) {}
    std::optional<ExitStatus> status;
    asio::steady_timer wake;
  };
  auto done = std::make_shared<Done>(io);
  done->wake.expires_after(timeout);
  process->watch_exit([done](const ExitStatus& s) {
    done->status = s;
    done->wake.cancel();
  });
  co_await done->wake.async_wait(asio::as_tuple(asio::use_awaitable));
  if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) {
    // The agent is stopping: the command goes now (its process's end kills and reaps it).
    containment.ended(process->pid());
    process.reset();
    throw boost::system::system_error(asio::error::operation_aborted);
  }
  const bool timed_out = !done->status;
  if (timed_out) {
    process->signal_group(SIGKILL);
    done->wake.expires_after(kReapLimit);
    co_await done->wake.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  containment.ended(process->pid());
  process.reset();  // reaps it (killing what is left, if the kill has not been seen yet)
  if (!timed_out && done->status->code == 0) co_return std::nullopt;
  const std::string said = last_line_of_file(log_file);
  std::string why;
  if (timed_out) {
    why = fmt::format("timed out after {:g} s", std::chrono::duration<double>(timeout).count());
  } else if (done->status->code > 0) {
    why = fmt::format("exit status {}", done->status->code);
  } else {
    why = fmt::format("killed by signal {}", -done->status->code);
  }
  co_return said.empty() ? why : why + ": " + said;
}

}  // namespace ddprun::agent
