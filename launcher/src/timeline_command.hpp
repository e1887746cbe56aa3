#pragma once
// `ddprun timeline EVENT_LOG... [-o FILE] [--html]`: every node's --event_log of one job merged
// onto one time axis and written as a Chrome trace-event file (Perfetto's UI, chrome://tracing) or,
// with --html, as a self-contained page (timeline/html_view.hpp). What cannot be drawn is reported
// on stderr by file and line, and the rest is drawn.
#include <string>
#include <vector>

namespace ddprun::launcher {

// Runs the subcommand (args: what follows "timeline"); returns the exit status: 0 written, 1
// nothing to draw (no event of any job) or the output not writable, 2 usage error.
int run_timeline(const std::vector<std::string>& args);

}  // namespace ddprun::launcher
