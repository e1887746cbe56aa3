#include "timeline_command.hpp"

#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "timeline/chrome_trace.hpp"
#include "timeline/event_logs.hpp"
#include "timeline/html_view.hpp"
#include "timeline/job_timeline.hpp"

namespace ddprun::launcher {

int run_timeline(const std::vector<std::string>& args) {
  CLI::App app{
      "ddprun timeline: a job's nodes, rounds, restarts, hangs and checkpoints on one "
      "time axis, from every node's --event_log",
      "ddprun timeline"};
  std::vector<std::string> logs;
  std::string out;
  bool html = false;
  app.add_option("event_logs", logs, "the nodes' event logs (files, or folders holding them)")
      ->required();
  app.add_option("-o,--output", out,
                 "where to write (default: timeline.json, or timeline.html with --html)");
  app.add_flag("--html", html, "a self-contained HTML page instead of a Chrome trace");
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "ddprun timeline: " << e.what() << '\n';
    return 2;
  }
  if (out.empty()) out = html ? "timeline.html" : "timeline.json";
  const timeline::EventLogs read = timeline::read_event_logs(logs);
  for (const std::string& problem : read.problems)
    std::cerr << "ddprun timeline: " << problem << '\n';
  if (read.events.empty()) {
    std::cerr << "ddprun timeline: no event to draw\n";
    return 1;
  }
  const timeline::JobTimeline job = timeline::build_timeline(read);
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file << (html ? timeline::html_view(job)
                : timeline::chrome_trace(job).dump(-1, ' ', false,
                                                   nlohmann::json::error_handler_t::replace));
  file.close();
  if (!file) {
    std::cerr << "ddprun timeline: cannot write " << out << '\n';
    return 1;
  }
  std::string clocks;
  for (const timeline::NodeTimeline& n : job.nodes) {
    clocks += fmt::format("{}{}: {}", clocks.empty() ? "" : "; ", n.label,
                          n.clock_offset_ms ? fmt::format("{:+.3f} ms (round trip {:.3f} ms)",
                                                          *n.clock_offset_ms, *n.round_trip_ms)
                                            : std::string("not measured"));
  }
  std::cerr << fmt::format(
      "ddprun timeline: wrote {}: job {}, {} node(s), {:.3f} s; clocks "
      "corrected to the store's: {}\n",
      out, job.run_id, job.nodes.size(), static_cast<double>(job.end_us - job.start_us) / 1e6,
      clocks);
  return 0;
}

}  // namespace ddprun::launcher
