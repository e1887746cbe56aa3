#include "workers/warm_interpreter.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "workers/warm_interpreter_source.hpp"
#include "workers/worker_env.hpp"

namespace ddprun::agent {
namespace {
// The name (made printable) of the first variable of `env` whose name or value is not UTF-8;
// nullopt where every one is.
std::optional<std::string> not_utf8(const Environment& env) {
  for (const auto& [name, value] : env) {
    try {
      (void)nlohmann::json(name).dump();
      (void)nlohmann::json(value).dump();
    } catch (const nlohmann::json::type_error&) {
      return nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  return std::nullopt;
}

namespace asio = boost::asio;

// How long one worker's fork may take before the interpreter counts as hung.
constexpr std::chrono::seconds kForkAnswerLimit{10};

bool send_message(int fd, const std::string& text, const std::array<int, 4>* fds) {
  iovec io{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  if (fds != nullptr) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * 4);
    std::memcpy(CMSG_DATA(c), fds->data(), sizeof(int) * 4);
  }
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(text.size());
}

// One message, or "" at end of file or error; nullopt when none is waiting.
std::optional<std::string> receive(int fd) {
  std::array<char, 4096> buf;
  ssize_t n;
  do {
    n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::nullopt;
  return n <= 0 ? std::string() : std::string(buf.data(), static_cast<size_t>(n));
}

}  // namespace

WarmInterpreter::WarmInterpreter(asio::io_context& io, Containment& containment,
                                 const std::vector<std::string>& entrypoint, PreloadSpec preload)
    : io_(io), containment_(containment), preload_(std::move(preload)) {
  auto it = entrypoint.begin();
  if (it != entrypoint.end()) python_.push_back(*it++);
  while (it != entrypoint.end() && it->starts_with("-") && *it != "-m") python_.push_back(*it++);
  std::error_code ec;
  main_dir_ = std::filesystem::current_path(ec).string();
  if (it != entrypoint.end() && *it != "-m") {
    const auto script = std::filesystem::canonical(*it, ec);
    if (!ec) main_dir_ = script.parent_path().string();
  }
  // Twice the template's length: ${local_rank} and the like grow a little when filled in.
  command_room_ = 256;
  for (const auto& a : entrypoint) command_room_ += 2 * (a.size() + 1);
}

WarmInterpreter::~WarmInterpreter() { retire(); }

void WarmInterpreter::prepare(const Environment& shared_env) {
  if (!given_up_.empty()) return;
  const bool alive = process_ && process_->running();
  if (alive && shared_env == env_) return;
  if (alive) {
    go_cold("the workers' environment changed; a new warm interpreter imports with it", false);
  }
  retire();
  launch(shared_env);
}

void WarmInterpreter::launch(const Environment& env) {
  // The interpreter is given the environment as JSON, which holds only UTF-8 text; a worker's
  // environment is bytes, as torchrun passes them: such a job starts its workers cold.
  if (const std::optional<std::string> name = not_utf8(env)) {
    go_cold(fmt::format("the environment variable {} is not UTF-8 text, which the warm interpreter "
                        "cannot be given",
                        *name),
            true);
    return;
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    go_cold(fmt::format("socketpair: {}", std::strerror(errno)), false);
    return;
  }
  auto ours = std::make_unique<asio::posix::stream_descriptor>(io_, sv[0]);
  SpawnSpec spec;
  spec.argv = python_;
  // Room in its argument area for each worker's command line (written over it after the fork).
  spec.argv.insert(spec.argv.end(), {"-", "3", main_dir_, std::string(command_room_, '.')});
  spec.argv.insert(spec.argv.end(), preload_.modules.begin(), preload_.modules.end());
  spec.env = env;
  spec.stdin_pipe = true;
  spec.pass_fd = sv[1];
  try {
    process_ = std::make_unique<WorkerProcess>(io_, spec);
  } catch (const std::system_error& e) {
    ::close(sv[1]);
    go_cold(fmt::format("cannot start the warm interpreter: {}", e.what()), false);
    return;
  }
  ::close(sv[1]);
  const int source_pipe = process_->take_stdin_pipe();
  const std::string_view source = warm_interpreter_source();
  // Much less than a pipe's buffer: the write does not wait for the interpreter.
  [[maybe_unused]] auto written = ::write(source_pipe, source.data(), source.size());
  ::close(source_pipe);
  nlohmann::json given(env);
  send_message(ours->native_handle(), given.dump(), nullptr);
  control_ = std::move(ours);
  env_ = env;
  ready_ = false;
  launched_at_ = std::chrono::steady_clock::now();
  const pid_t pid = process_->pid();
  containment_.started(pid, "");
  process_->watch_exit([this, pid](const ExitStatus& s) {
    containment_.ended(pid);
    if (!process_ || process_->pid() != pid) return;
    // Its own "cold" answer explains an exit already.
    if (given_up_.empty() && (ready_ || take_ready_message() != Heard::kCold)) {
      go_cold(fmt::format("the warm interpreter exited ({}); a new one starts with the next round",
                          s.code < 0 ? fmt::format("signal {}", -s.code)
                                     : fmt::format("status {}", s.code)),
              false);
    }
    control_.reset();
    ready_ = false;
  });
  spdlog::debug("warm interpreter {} imports {}", pid, fmt::join(preload_.modules, ","));
}

void WarmInterpreter::retire() {
  control_.reset();
  end_process();
}

void WarmInterpreter::end_process() {
  if (process_) {
    const pid_t pid = process_->pid();
    const bool running = process_->running();
    process_.reset();  // kills and reaps it
    if (running) containment_.ended(pid);
  }
  ready_ = false;
}

WarmInterpreter::Heard WarmInterpreter::take_ready_message() {
  if (!control_) return Heard::kNothing;
  const auto m = receive(control_->native_handle());
  if (!m) return Heard::kNothing;
  if (m->starts_with("ready ")) {
    ready_ = true;
    last_cold_.clear();
    spdlog::info("--preload: workers start from a warm interpreter (pid {}) that imported {}",
                 process_ ? process_->pid() : -1, m->size() > 6 ? m->substr(6) : "nothing");
    return Heard::kReady;
  }
  control_.reset();  // it exits now: nothing more will come
  if (m->starts_with("cold ")) {
    go_cold(m->substr(5), true);
    return Heard::kCold;
  }
  return Heard::kEnded;
}

asio::awaitable<void> WarmInterpreter::until_heard(std::chrono::milliseconds limit,
                                                   const std::function<bool()>& heard) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  asio::steady_timer timer(io_, deadline);
  timer.async_wait([this](boost::system::error_code ec) {
    if (!ec && control_) control_->cancel();
  });
  // Readability is a hint (worker_process.hpp, await_exit): the message itself ends the wait.
  bool done = false;
  while (!done && control_ && std::chrono::steady_clock::now() < deadline) {
    boost::system::error_code ec;
    co_await control_->async_wait(asio::posix::stream_descriptor::wait_read,
                                  asio::redirect_error(asio::use_awaitable, ec));
    done = heard();
  }
  timer.cancel();
}

asio::awaitable<void> WarmInterpreter::ready(std::chrono::milliseconds limit) {
  if (ready_ || !control_ || !given_up_.empty()) co_return;
  Heard heard = take_ready_message();
  if (heard == Heard::kNothing) {
    co_await until_heard(limit, [&] {
      heard = take_ready_message();
      return heard != Heard::kNothing;
    });
  }
  if (heard == Heard::kNothing) {
    go_cold(fmt::format("the warm interpreter is not ready after {} s",
                        std::chrono::duration_cast<std::chrono::seconds>(limit).count()),
            false);
  } else if (heard == Heard::kEnded) {
    go_cold("the warm interpreter ended before it was ready", false);
  }
}

bool WarmInterpreter::settled(std::chrono::milliseconds limit) {
  if (!ready_ && control_ && given_up_.empty() && take_ready_message() == Heard::kEnded) {
    go_cold("the warm interpreter ended before it was ready", false);
  }
  if (ready_ || !control_ || !given_up_.empty()) return true;
  if (std::chrono::steady_clock::now() - launched_at_ < limit) return false;
  go_cold(fmt::format("the warm interpreter is not ready after {:g} s; standbys start cold",
                      std::chrono::duration<double>(limit).count()),
          false);
  return true;
}

asio::awaitable<void> WarmInterpreter::answering(std::chrono::milliseconds limit) {
  if (!ready_ || !control_) co_return;
  std::optional<std::string> answer;
  if (!send_message(control_->native_handle(), R"({"ping": true})", nullptr)) {
    answer = std::string();
  }
  if (!answer) answer = receive(control_->native_handle());
  if (!answer) {
    co_await until_heard(limit, [&] {
      if (control_) answer = receive(control_->native_handle());
      return answer.has_value();
    });
  }
  if (answer == "pong") co_return;
  retire();
  if (answer && answer->starts_with("cold ")) {
    go_cold(answer->substr(5), true);
  } else {
    go_cold(answer ? "the warm interpreter ended; a new one starts with the next round"
                   : fmt::format("the warm interpreter did not answer in {} s; a new one starts "
                                 "with the next round",
                                 std::chrono::duration_cast<std::chrono::seconds>(limit).count()),
            false);
  }
}

asio::awaitable<std::optional<pid_t>> WarmInterpreter::start(const SpawnSpec& spec, ChildFds fds) {
  stop_forking_ = false;
  if (!ready_ && take_ready_message() == Heard::kEnded) {
    go_cold("the warm interpreter ended before it was ready", false);
  }
  if (!ready_ || !control_) co_return std::nullopt;
  if (spec.argv.size() <= python_.size() ||
      !std::equal(python_.begin(), python_.end(), spec.argv.begin())) {
    go_cold("the worker's interpreter or options differ from the warm interpreter's", false);
    co_return std::nullopt;
  }
  if (shared_part(spec.env) != env_) {
    go_cold("this worker's environment differs from the warm interpreter's", false);
    co_return std::nullopt;
  }
  nlohmann::json request = {
      {"args", std::vector<std::string>(spec.argv.begin() + static_cast<long>(python_.size()),
                                        spec.argv.end())},
      {"env", spec.env},
      {"cpus", spec.cpus},
      {"agent", ::getpid()},
      {"cgroup", fds.cgroup_procs >= 0},
  };
  std::string text;
  try {
    text = request.dump();
  } catch (const nlohmann::json::exception&) {  // (the shared environment was checked at launch)
    go_cold("this worker's command line or own variables are not UTF-8 text", false);
    co_return std::nullopt;
  }
  int stand_in = -1;
  if (fds.cgroup_procs < 0) stand_in = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  const std::array<int, 4> passed{fds.in, fds.out, fds.err,
                                  fds.cgroup_procs >= 0 ? fds.cgroup_procs : stand_in};
  const int sock = control_->native_handle();
  const bool sent = passed[3] >= 0 && send_message(sock, text, &passed);
  if (stand_in >= 0) ::close(stand_in);
  std::string answer;
  bool given_up = false;  // no answer in time, or the workers stopped: the interpreter goes
  if (sent) {
    std::optional<std::string> heard = receive(sock);
    if (!heard) {
      forking_ = true;
      co_await until_heard(kForkAnswerLimit, [&] {
        if (control_) heard = receive(control_->native_handle());
        return heard.has_value() || stop_forking_;
      });
      forking_ = false;
    }
    if (!heard && control_) {
      // It ends first: a worker it reported before it ended is read here (it reports a worker
      // before it lets it run), and one it did not report ends without running anything.
      end_process();
      heard = receive(control_->native_handle());
      given_up = true;
    }
    answer = heard.value_or("");
  }
  if (given_up) retire();
  if (answer.starts_with("pid ")) {
    if (!given_up) last_cold_.clear();
    co_return static_cast<pid_t>(std::stol(answer.substr(4)));
  }
  retire();
  if (answer.starts_with("cold ")) {
    go_cold(answer.substr(5), true);
  } else if (stop_forking_) {
    go_cold(
        "the workers stopped while the warm interpreter forked one; a new one starts with the "
        "next round",
        false);
  } else {
    go_cold(sent ? "the warm interpreter did not answer; a new one starts with the next round"
                 : "cannot reach the warm interpreter; a new one starts with the next round",
            false);
  }
  co_return std::nullopt;
}

void WarmInterpreter::stop_forking() {
  if (!forking_) return;
  stop_forking_ = true;
  if (control_) control_->cancel();
}

void WarmInterpreter::go_cold(const std::string& why, bool for_good) {
  if (for_good) given_up_ = why;
  if (why == last_cold_) return;
  last_cold_ = why;
  spdlog::warn("--preload: workers start cold{}: {}", for_good ? " from now on" : "", why);
}

}  // namespace ddprun::agent
