#pragma once
// Reading `--event_log` files for `ddprun timeline`: one JSON object per line (agent/src/logs/
// event_log.hpp). What cannot be drawn (a truncated or interleaved line, a line without the fields
// every event has, another job's events, an empty or unreadable file) is reported by file and line
// and skipped; the rest is kept.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun::launcher::timeline {

struct LogEvent {
  std::string file;
  int line = 0;
  std::string node;     // the host
  int64_t agent = 0;    // the agent's pid (0 in logs written before it was recorded)
  int64_t time_us = 0;  // the node's wall clock, µs since the epoch
  std::string event;
  nlohmann::json fields;  // the whole line
};

struct EventLogs {
  std::string run_id;                 // the job drawn: the one with the most events
  std::vector<LogEvent> events;       // that job's, in file order
  std::vector<std::string> problems;  // "FILE:LINE: what" (or "FILE: what"), one per problem
};

// Reads every path: a file, or a folder whose regular files are all read (in name order).
EventLogs read_event_logs(const std::vector<std::string>& paths);

}  // namespace ddprun::launcher::timeline
