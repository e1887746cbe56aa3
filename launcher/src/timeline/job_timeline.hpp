#pragma once
// A job's timeline, built from every node's event log: per node, on one time axis (the store's
// clock: each node's times corrected by the offset it measured against the job's store when it
// joined, where it did), its rounds, attempts and workers as spans, the phases of each restart,
// and everything else that happened as marks.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "timeline/event_logs.hpp"

namespace ddprun::launcher::timeline {

// Where a span or mark is drawn within its node.
constexpr int kAgentTrack = -2;    // rounds, attempts, the agent's own events
constexpr int kRestartTrack = -1;  // the phases of each restart
// Any other track: the worker of that local rank.

struct Span {
  int track = kAgentTrack;
  std::string name;
  // "round"; an attempt by how it ended: "succeeded", "failed", "hung", "stopped" (by ddprun, for
  // another node's failure or a signal), "unfinished" (the log ends first); "worker"; a restart
  // phase: "stopping", "rendezvous", "starting".
  std::string kind;
  int64_t start_us = 0;  // corrected, µs since the epoch
  int64_t end_us = 0;
  nlohmann::json details = nlohmann::json::object();
};

struct Mark {
  int track = kAgentTrack;
  std::string name;  // the event
  int64_t time_us = 0;
  nlohmann::json details;  // the event's line
};

struct NodeTimeline {
  std::string label;  // "node R · HOST" (R: its rank in its first round)
  std::string host;
  int64_t agent = 0;
  std::optional<double> clock_offset_ms;  // added to its times; nullopt: not measured (0 used)
  std::optional<double> round_trip_ms;
  int local_ranks = 0;
  std::vector<Span> spans;
  std::vector<Mark> marks;
};

struct JobTimeline {
  std::string run_id;
  int64_t start_us = 0;
  int64_t end_us = 0;
  std::vector<NodeTimeline> nodes;  // in order of their rank in their first round
};

JobTimeline build_timeline(const EventLogs& logs);

}  // namespace ddprun::launcher::timeline
