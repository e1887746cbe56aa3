#include "logs/event_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include <spdlog/spdlog.h>

#include "ddprun/agent/console.hpp"
#include "ddprun/store/wall_clock.hpp"

namespace ddprun::agent {

EventLog::EventLog(const std::string& path, int console_fd, std::string node, std::string run_id)
    : console_fd_(console_fd), node_(std::move(node)), run_id_(std::move(run_id)) {
  if (path.empty()) return;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    throw std::system_error(errno, std::generic_category(), "--event_log " + path);
  }
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

void EventLog::record(const std::string& event, nlohmann::json fields) {
  if (observer_) observer_(event, fields);
  if (fd_ < 0 && console_fd_ < 0) return;
  nlohmann::json line = nlohmann::json::object();
  line["time_ms"] = store::wall_clock_micros() / 1000;
  line["node"] = node_;
  line["agent_pid"] = ::getpid();  // tells apart agents of one host (and of one shared file)
  line["run_id"] = run_id_;
  line["event"] = event;
  for (auto& [key, value] : fields.items()) line[key] = std::move(value);
  // Invalid UTF-8 (a worker's bytes in a reason) is replaced, never an exception.
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (console_fd_ >= 0) Console::of(console_fd_).write(text);
  if (fd_ < 0) return;
  ssize_t n;
  do {
    n = ::write(fd_, text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(text.size()) && !write_failed_) {
    write_failed_ = true;
    spdlog::warn("--event_log: a write failed ({}); later events may be missing",
                 n < 0 ? std::strerror(errno) : "short write");
  }
}

}  // namespace ddprun::agent
