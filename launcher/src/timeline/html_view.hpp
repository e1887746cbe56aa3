#pragma once
// A job's timeline as one self-contained HTML page (no network access, no external script; opens
// from file://): a row per node, each attempt a bar coloured by how it ended, each restart's
// phases shaded, rounds as ticks, events as marks; hover for a summary, click for the details,
// the wheel zooms, a drag pans, a double click shows everything again.
#include <string>

#include "timeline/job_timeline.hpp"

namespace ddprun::launcher::timeline {

std::string html_view(const JobTimeline& job);

}  // namespace ddprun::launcher::timeline
