#include "watchers/stack_capture.hpp"

#include <csignal>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "logs/log_pump.hpp"
#include "node/bounded_command.hpp"

namespace ddprun::agent {
namespace {
// After SIGABRT, how long Python workers have to write their stacks and die.
constexpr auto kStackDumpLimit = std::chrono::seconds(2);
// How long the other nodes may take to hear of a hang, and then to freeze their workers, before
// this node's workers dump their stacks anyway.
constexpr auto kAnnounceLimit = std::chrono::seconds(1);
constexpr auto kFreezeLimit = std::chrono::seconds(3);
// How long gdb may take to attach to a hung native worker and print its threads' backtraces.
constexpr auto kNativeStackLimit = std::chrono::seconds(20);
}  // namespace

StackCapture::StackCapture(boost::asio::io_context& io, Containment& containment,
                           AttemptControl& group)
    : io_(io), containment_(containment), group_(group), timer_(io) {}

void StackCapture::capture(bool python, std::string gdb, std::string dump_dir) {
  python_ = python;
  gdb_ = std::move(gdb);
  dump_dir_ = std::move(dump_dir);
}

void StackCapture::add_variables(Environment& env) const {
  if (python_) env.try_emplace("PYTHONFAULTHANDLER", "1");
}

void StackCapture::prepare(Attempt& attempt) const {
  for (RunningWorker& w : attempt.workers) {
    w.launch.spawn.debuggable = !python_ && !gdb_.empty();
    add_variables(w.launch.spawn.env);
  }
}

Attempt* StackCapture::attempt_numbered(uint64_t number) {
  Attempt* a = group_.running_attempt();
  return a != nullptr && a->number == number ? a : nullptr;
}

std::function<void()> StackCapture::once_in_attempt(uint64_t number,
                                                    std::function<void(Attempt&)> step,
                                                    std::chrono::milliseconds limit) {
  auto done = std::make_shared<bool>(false);
  auto go = [this, done, step = std::move(step), number] {
    if (std::exchange(*done, true)) return;
    if (Attempt* a = attempt_numbered(number)) step(*a);
  };
  timer_.expires_after(limit);
  timer_.async_wait([go](boost::system::error_code ec) {
    if (!ec) go();
  });
  return go;
}

void StackCapture::on_hang(Attempt& attempt) {
  attempt.stacks_wanted = captures();
  if (!coordinator_.announce) {
    dump_then_stop(attempt);
    return;
  }
  if (python_) freeze(attempt);
  // The other nodes are told first, so that their ranks are frozen where the hang holds them too.
  coordinator_.announce(once_in_attempt(
      attempt.number, [this](Attempt& a) { freeze_then_dump(a); }, kAnnounceLimit));
}

void StackCapture::on_peer_hang(Attempt& attempt) {
  attempt.stacks_wanted = true;
  freeze_then_dump(attempt);
}

void StackCapture::freeze(const Attempt& attempt) const {
  for (const RunningWorker& w : attempt.workers) {
    if (w.running()) ::kill(w.process->pid(), SIGSTOP);
  }
}

void StackCapture::freeze_then_dump(Attempt& attempt) {
  if (!python_ || !coordinator_.frozen) {
    dump_then_stop(attempt);
    return;
  }
  attempt.enter(AttemptPhase::kCapturing, std::chrono::steady_clock::now());
  freeze(attempt);
  coordinator_.frozen(once_in_attempt(
      attempt.number, [this](Attempt& a) { dump_then_stop(a); }, kFreezeLimit));
}

void StackCapture::dump_then_stop(Attempt& attempt) {
  if (!attempt.stacks_wanted) {
    group_.stop_workers(attempt.number);
    return;
  }
  attempt.enter(AttemptPhase::kCapturing, std::chrono::steady_clock::now());
  if (!python_) {
    boost::asio::co_spawn(io_, read_native_stacks(attempt.number), boost::asio::detached);
    return;
  }
  group_.count_ended_workers();
  for (RunningWorker& w : attempt.workers) {
    if (!w.running()) continue;
    w.stopped_by_us = true;
    ::kill(w.process->pid(), SIGABRT);
    ::kill(w.process->pid(), SIGCONT);  // frozen: the pending SIGABRT comes first
  }
  timer_.expires_after(kStackDumpLimit);
  timer_.async_wait([this, number = attempt.number](boost::system::error_code ec) {
    if (!ec) group_.stop_workers(number);
  });
}

boost::asio::awaitable<void> StackCapture::read_native_stacks(uint64_t attempt) {
  namespace asio = boost::asio;
  // One gdb per worker, all at once, each bounded; the stop comes once every one has ended.
  struct Pending {
    explicit Pending(asio::io_context& io) : done(io) {}
    size_t left = 0;
    asio::steady_timer done;
  };
  auto pending = std::make_shared<Pending>(io_);
  pending->done.expires_at(asio::steady_timer::time_point::max());
  Attempt* a = attempt_numbered(attempt);
  for (size_t i = 0; a != nullptr && i < a->workers.size(); ++i) {
    const RunningWorker& w = a->workers[i];
    if (!w.running()) continue;
    ++pending->left;
    const std::string file = fmt::format("{}/stacks.{}", dump_dir_, i);
    const std::string command = fmt::format(
        "exec '{}' -p {} -batch -nx -q -ex 'set pagination off' -ex 'thread apply all bt'", gdb_,
        w.process->pid());
    asio::co_spawn(
        io_,
        [this, i, file, command, pending, env = w.launch.spawn.env,
         attempt]() -> asio::awaitable<void> {
          try {
            co_await run_bounded_command(io_, containment_, command, kNativeStackLimit, env, file);
          } catch (const std::exception& e) {  // (no fork, no dump folder: no stack, still a stop)
            spdlog::warn("hang: local rank {}'s native stack could not be taken: {}", i, e.what());
          }
          if (Attempt* now = attempt_numbered(attempt); now != nullptr && i < now->workers.size()) {
            std::ifstream in(file);
            now->workers[i].native_dump.assign(std::istreambuf_iterator<char>(in), {});
          }
          std::error_code gone;
          std::filesystem::remove(file, gone);
          if (--pending->left == 0) pending->done.cancel();
        },
        asio::detached);
  }
  if (pending->left > 0) {
    co_await pending->done.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  group_.stop_workers(attempt);
}

std::optional<WorkerStack> StackCapture::stack_of(const RunningWorker& w) const {
  if (python_ && w.kept) return python_threads_stack(w.parked_stack);
  if (python_) return w.err_pump ? last_python_stack(w.err_pump->tail()) : std::nullopt;
  if (w.native_dump.empty() || !w.process) return std::nullopt;
  return gdb_stack(w.native_dump, w.process->pid());
}

AttemptStacks StackCapture::collect(const Attempt& attempt) const {
  AttemptStacks stacks;
  for (const RunningWorker& w : attempt.workers) {
    const int rank = w.launch.id.rank;
    const std::optional<WorkerStack> stack = stack_of(w);
    std::string& frame = stacks.frames[rank];
    frame = stack    ? stack->innermost
            : w.kept ? "no stack (it aborted its attempt and waits to run again in process)"
                     : "no stack (the worker wrote none)";
    stacks.text += fmt::format("=== rank {} (local_rank {}) ===\n{}\n", rank,
                               w.launch.id.local_rank, stack ? stack->text : frame);
  }
  return stacks;
}

}  // namespace ddprun::agent
