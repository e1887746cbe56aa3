#include "ddprun/agent/error_file.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ddprun::agent {
namespace {

std::optional<long> as_long(const nlohmann::json& j) {
  if (j.is_number_integer()) return j.get<long>();
  if (j.is_string()) {
    try {
      return std::stol(j.get<std::string>());
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  ErrorRecord r;
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("message")) {
    r.message = "(unreadable error file: not torch's error JSON)";
    return r;
  }
  const auto& m = j["message"];
  if (m.is_string()) {
    r.message = m.get<std::string>();
    if (j.contains("timestamp")) r.timestamp = as_long(j["timestamp"]);
    return r;
  }
  if (m.is_object()) {
    if (m.contains("message") && m["message"].is_string())
      r.message = m["message"].get<std::string>();
    if (m.contains("errorCode")) {
      if (auto code = as_long(m["errorCode"])) r.error_code = static_cast<int>(*code);
    }
    if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
      const auto& extra = m["extraInfo"];
      if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
        r.traceback = extra["py_callstack"].get<std::string>();
      }
      if (extra.contains("timestamp")) r.timestamp = as_long(extra["timestamp"]);
    }
  }
  return r;
}

}  // namespace ddprun::agent
