#include "timeline/event_logs.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

namespace ddprun::launcher::timeline {
namespace fs = std::filesystem;
namespace {

std::vector<std::string> files_of(const std::vector<std::string>& paths,
                                  std::vector<std::string>& problems) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> inside;
      for (const auto& e : fs::directory_iterator(path, ec)) {
        if (e.is_regular_file(ec)) inside.push_back(e.path().string());
      }
      std::sort(inside.begin(), inside.end());
      if (inside.empty()) problems.push_back(fmt::format("{}: a folder with no files", path));
      files.insert(files.end(), inside.begin(), inside.end());
    } else {
      files.push_back(path);
    }
  }
  return files;
}

// The event on `text`, or why it is none.
std::string parse_line(const std::string& text, LogEvent& out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return "not one JSON object (a truncated line, or two agents' lines interleaved)";
  }
  const auto field = [&j](const char* name) {
    auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  const auto* time = field("time_ms");
  const auto* event = field("event");
  const auto* node = field("node");
  const auto* run = field("run_id");
  if (time == nullptr || !time->is_number() || event == nullptr || !event->is_string() ||
      node == nullptr || !node->is_string() || run == nullptr || !run->is_string()) {
    return "not an event (time_ms, event, node and run_id are needed)";
  }
  out.time_us = static_cast<int64_t>(time->get<double>() * 1000.0);
  out.event = event->get<std::string>();
  out.node = node->get<std::string>();
  const auto* agent = field("agent_pid");
  out.agent = agent != nullptr && agent->is_number_integer() ? agent->get<int64_t>() : 0;
  out.fields = std::move(j);
  return "";
}

}  // namespace

EventLogs read_event_logs(const std::vector<std::string>& paths) {
  EventLogs logs;
  std::vector<LogEvent> all;
  for (const std::string& file : files_of(paths, logs.problems)) {
    std::ifstream in(file);
    if (!in) {
      logs.problems.push_back(fmt::format("{}: cannot be read", file));
      continue;
    }
    std::string text;
    int line = 0;
    size_t before = all.size();
    while (std::getline(in, text)) {
      ++line;
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      LogEvent e;
      e.file = file;
      e.line = line;
      if (const std::string why = parse_line(text, e); !why.empty()) {
        logs.problems.push_back(fmt::format("{}:{}: {}: skipped", file, line, why));
        continue;
      }
      all.push_back(std::move(e));
    }
    if (all.size() == before) logs.problems.push_back(fmt::format("{}: no events", file));
  }
  std::map<std::string, size_t> per_run;
  for (const LogEvent& e : all) ++per_run[e.fields["run_id"].get<std::string>()];
  for (const auto& [run, n] : per_run) {
    if (logs.run_id.empty() || n > per_run[logs.run_id]) logs.run_id = run;
  }
  std::map<std::pair<std::string, std::string>, const LogEvent*> first_elsewhere;
  for (const LogEvent& e : all) {
    const std::string run = e.fields["run_id"].get<std::string>();
    if (run == logs.run_id) {
      logs.events.push_back(e);
    } else if (!first_elsewhere.contains({e.file, run})) {
      first_elsewhere[{e.file, run}] = &e;
    }
  }
  for (const auto& [key, e] : first_elsewhere) {
    logs.problems.push_back(
        fmt::format("{}:{}: events of job {} ({} in all), not of job {}, which is drawn: skipped",
                    e->file, e->line, key.second, per_run[key.second], logs.run_id));
  }
  return logs;
}

}  // namespace ddprun::launcher::timeline
