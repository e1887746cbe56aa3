#include "ddprun/agent/failure_json.hpp"

#include <nlohmann/json.hpp>

namespace ddprun::agent {
namespace {

nlohmann::json to_json(const WorkerFailure& f) {
  return {
      {"local_rank", f.local_rank},
      {"rank", f.rank},
      {"pid", f.pid},
      {"exitcode", f.exitcode},
      {"time_us",
       std::chrono::duration_cast<std::chrono::microseconds>(f.time.time_since_epoch()).count()},
      {"error_file", f.error_file},
      {"message", f.error ? f.error->message : ""},
      {"traceback", f.error ? f.error->traceback : ""},
      {"host", f.host},
      {"sigkill_sent_by_ddprun", f.sigkill_sent_by_ddprun},
      {"oom_killed", f.oom_killed},
      {"ended_because", f.ended_because}};
}

WorkerFailure from_json(const nlohmann::json& j) {
  WorkerFailure f;
  f.local_rank = j.value("local_rank", 0);
  f.rank = j.value("rank", 0);
  f.pid = j.value("pid", 0);
  f.exitcode = j.value("exitcode", 0);
  f.time = std::chrono::system_clock::time_point(std::chrono::microseconds(j.value("time_us", 0L)));
  f.error_file = j.value("error_file", "");
  f.host = j.value("host", "");
  f.sigkill_sent_by_ddprun = j.value("sigkill_sent_by_ddprun", false);
  f.oom_killed = j.value("oom_killed", false);
  f.ended_because = j.value("ended_because", "");
  const std::string message = j.value("message", ""), traceback = j.value("traceback", "");
  if (!message.empty() || !traceback.empty()) f.error = ErrorRecord{message, traceback, {}, {}};
  return f;
}

}  // namespace

std::string failures_to_json(const std::vector<WorkerFailure>& failures) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : failures) list.push_back(to_json(f));
  // A worker's text need not be UTF-8 (a Latin-1 locale, a native library's bytes): what is not
  // becomes U+FFFD rather than fail the report, and with it the job's restart.
  return list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<WorkerFailure> failures_from_json(const std::string& text) {
  std::vector<WorkerFailure> out;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) return out;
  for (const auto& f : j) out.push_back(from_json(f));
  return out;
}

}  // namespace ddprun::agent
