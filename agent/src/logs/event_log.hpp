#pragma once
// --event_log: what an agent sees, as one JSON object per line appended to a file (and, with
// --event_log_handler=console, written to stderr too, never blocking the agent): the rendezvous
// rounds and their members, nodes joining and leaving, workers started and exited, restarts, the
// exit barrier, the job's end. Each line is written with one write(2) to a file opened for
// appending, as it happens: a crash of the agent loses nothing already recorded, and several agents
// may share one file (lines never interleave).
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace ddprun::agent {

class EventLog {
 public:
  // Writes no file (an observer may still be set).
  EventLog() = default;
  // Appends to `path` (created if missing; "" for none) and writes to `console_fd` (-1 for none).
  // Every line carries `node` and `run_id`. Throws std::system_error when the file cannot be
  // opened.
  EventLog(const std::string& path, int console_fd, std::string node, std::string run_id);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends {"time_ms": <wall clock, ms since the epoch>, "node", "run_id", "event": event,
  // ...fields}. A failed write is reported once on the log and not retried.
  void record(const std::string& event, nlohmann::json fields = nlohmann::json::object());
  // Also hands every event to `observer` (the agent's metrics are kept from the same events).
  void set_observer(std::function<void(const std::string&, const nlohmann::json&)> observer) {
    observer_ = std::move(observer);
  }

 private:
  int fd_ = -1;
  int console_fd_ = -1;
  std::string node_;
  std::string run_id_;
  bool write_failed_ = false;
  std::function<void(const std::string&, const nlohmann::json&)> observer_;
};

}  // namespace ddprun::agent
