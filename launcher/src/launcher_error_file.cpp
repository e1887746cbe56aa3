#include "launcher_error_file.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace ddprun::launcher {
namespace {

using Json = nlohmann::ordered_json;  // (the worker's keys stay in its order, as json.load keeps)

// A JSON scalar with ensure_ascii, as Python's default; bytes that are not UTF-8 (a path, a value
// given on the command line) become U+FFFD rather than an exception.
std::string text(const Json& scalar) {
  return scalar.dump(-1, ' ', true, Json::error_handler_t::replace);
}

// Python's json.dumps with its default separators (", " and ": "), as torch writes the file.
std::string python_dumps(const Json& j) {
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      if (!first) out += ", ";
      first = false;
      out += text(Json(key)) + ": " + python_dumps(value);
    }
    return out + "}";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + python_dumps(j[i]);
    return out + "]";
  }
  return text(j);
}

// Writes `record` to `path`; a file there is replaced (said where `warn`, as torch says it when it
// copies a worker's record). Never throws.
void replace_file(const std::string& path, const std::string& record, bool warn) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    if (warn) spdlog::warn("{} already exists and is overwritten with this launcher's error", path);
    std::filesystem::remove(path, ec);
  }
  std::ofstream out(path);
  out << record;
  out.close();
  if (!out) spdlog::warn("could not write this launcher's error to {}", path);
}

std::string exception_record(const std::string& message) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  Json extra;
  extra["py_callstack"] = "";
  extra["timestamp"] =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count());
  Json inner;
  inner["message"] = message;
  inner["extraInfo"] = extra;
  Json record;
  record["message"] = inner;
  return python_dumps(record);
}

// The worker's error file with its exit status as "errorCode"; nullopt where it is not JSON.
std::optional<std::string> child_record(const agent::WorkerFailure& f) {
  std::ifstream in(f.error_file);
  std::stringstream text;
  text << in.rdbuf();
  Json record = Json::parse(text.str(), nullptr, false);
  if (!in || record.is_discarded()) {
    spdlog::warn("the error file of rank {} ({}) is not JSON: not copied to this launcher's",
                 f.rank, f.error_file);
    return std::nullopt;
  }
  if (f.exitcode != 0 && record.is_object() && record.contains("message") &&
      record["message"].is_object()) {
    record["message"]["errorCode"] = f.exitcode;
  }
  return python_dumps(record);
}

void write_outcome(const std::string& path, const agent::AgentOutcome& outcome) {
  using State = agent::AgentOutcome::State;
  switch (outcome.state) {
    case State::kSucceeded:
      return;
    case State::kFailed:
      if (outcome.own_failure && !outcome.own_failure->error_file.empty()) {
        if (const auto record = child_record(*outcome.own_failure)) {
          replace_file(path, *record, true);
        }
      }
      return;
    case State::kSignaled:
      replace_file(path,
                   exception_record(fmt::format("SignalException: Process {} got signal: {}",
                                                ::getpid(), outcome.signal)),
                   false);
      return;
    case State::kLaunchError:
      replace_file(path, exception_record("LaunchError: " + outcome.summary), false);
      return;
    case State::kUnhealthy:
      replace_file(path, exception_record("UnhealthyNode: " + outcome.summary), false);
      return;
  }
}

}  // namespace

void write_launcher_error_file(const std::string& path, const agent::AgentOutcome& outcome) {
  try {
    write_outcome(path, outcome);
  } catch (const std::exception& e) {
    spdlog::warn("could not write this launcher's error to {}: {}", path, e.what());
  }
}

void write_refused_value(const std::string& path, const std::string& what) {
  try {
    replace_file(path, exception_record("ValueError: " + what), false);
  } catch (const std::exception& e) {
    spdlog::warn("could not write this launcher's error to {}: {}", path, e.what());
  }
}

}  // namespace ddprun::launcher
