#pragma once
// A shell command the agent runs for itself, bounded in time and contained: --health_check, which
// says whether this node may take part in the next round, and the debugger that reads a hung native
// worker's stacks.
#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "ddprun/agent/environment.hpp"
#include "node/containment.hpp"

namespace ddprun::agent {

// Runs `command` with /bin/sh -c, its stdout and stderr to `log_file`, in a process group (and
// cgroup) of its own that `containment` knows, so that it is never left behind. Waits at most
// `timeout` (then kills the group). nullopt: it exited 0. Else why not, with the last line it
// wrote: "exit status 3: no GPU 2", "timed out after 60 s: checking /scratch". Cancelled (the
// agent stops), it kills and reaps the command, then throws operation_aborted.
boost::asio::awaitable<std::optional<std::string>> run_bounded_command(
    boost::asio::io_context& io, Containment& containment, const std::string& command,
    std::chrono::milliseconds timeout, const Environment& env, const std::string& log_file);

}  // namespace ddprun::agent
