#include "timeline/chrome_trace.hpp"

#include <fmt/format.h>

namespace ddprun::launcher::timeline {
namespace {

using nlohmann::json;

int tid_of(int track) { return track == kAgentTrack ? 0 : track == kRestartTrack ? 1 : 10 + track; }

json metadata(const char* what, int pid, int tid, json args) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

}  // namespace

json chrome_trace(const JobTimeline& job) {
  json events = json::array();
  json offsets = json::object();
  const auto at = [&job](int64_t us) { return static_cast<double>(us - job.start_us); };
  for (size_t i = 0; i < job.nodes.size(); ++i) {
    const NodeTimeline& node = job.nodes[i];
    const int pid = static_cast<int>(i) + 1;
    events.push_back(metadata("process_name", pid, 0, {{"name", node.label}}));
    events.push_back(metadata("process_sort_index", pid, 0, {{"sort_index", pid}}));
    events.push_back(metadata("thread_name", pid, 0, {{"name", "agent: rounds, attempts"}}));
    events.push_back(metadata("thread_name", pid, 1, {{"name", "restart phases"}}));
    for (int r = 0; r < node.local_ranks; ++r) {
      events.push_back(
          metadata("thread_name", pid, tid_of(r), {{"name", fmt::format("local rank {}", r)}}));
    }
    for (const Span& s : node.spans) {
      events.push_back({{"name", s.name},
                        {"cat", s.kind},
                        {"ph", "X"},
                        {"ts", at(s.start_us)},
                        {"dur", static_cast<double>(s.end_us - s.start_us)},
                        {"pid", pid},
                        {"tid", tid_of(s.track)},
                        {"args", s.details}});
    }
    for (const Mark& m : node.marks) {
      events.push_back({{"name", m.name},
                        {"cat", "event"},
                        {"ph", "i"},
                        {"s", "t"},
                        {"ts", at(m.time_us)},
                        {"pid", pid},
                        {"tid", tid_of(m.track)},
                        {"args", m.details}});
    }
    offsets[node.label] = node.clock_offset_ms ? json(*node.clock_offset_ms) : json(nullptr);
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"run_id", job.run_id},
            {"origin_us_since_epoch", job.start_us},
            {"clock_offsets_ms", std::move(offsets)}}}};
}

}  // namespace ddprun::launcher::timeline
