#pragma once
// A job's timeline in the Chrome trace-event format (the JSON object form), which Perfetto's UI and
// chrome://tracing open as they are: one process per node, one thread per track (the agent's rounds
// and attempts, the restarts' phases, each local rank's workers); spans as complete events ("X"),
// marks as instant events ("i"), timestamps in µs from the job's first event.
#include <nlohmann/json.hpp>

#include "timeline/job_timeline.hpp"

namespace ddprun::launcher::timeline {

nlohmann::json chrome_trace(const JobTimeline& job);

}  // namespace ddprun::launcher::timeline
