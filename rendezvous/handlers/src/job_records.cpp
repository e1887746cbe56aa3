#include "ddprun/rendezvous/job_records.hpp"

#include <chrono>

#include <nlohmann/json.hpp>

namespace ddprun::rendezvous::records {
namespace {

// The object in `text`, or a discarded value where it is not one.
nlohmann::json object_of(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_object() ? j : nlohmann::json(nlohmann::json::value_t::discarded);
}

}  // namespace

std::string node_text(int nproc, const std::string& host, const std::string& addr) {
  const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  nlohmann::json j;
  j["nproc"] = nproc;
  j["host"] = host;
  j["since_ms"] = since;
  if (!addr.empty()) j["addr"] = addr;
  return j.dump();
}

std::optional<Node> parse_node(std::string_view text) {
  const auto j = object_of(text);
  if (j.is_discarded()) return std::nullopt;
  try {
    Node n;
    n.nproc = j.value("nproc", 0);
    n.host = j.value("host", "");
    n.addr = j.value("addr", "");
    if (j.contains("since_ms")) n.since_ms = j.at("since_ms").get<int64_t>();
    return n;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::string settings_text(const std::vector<std::pair<std::string, std::string>>& settings) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [flag, value] : settings) j[flag] = value;
  return j.dump();
}

std::optional<std::map<std::string, std::string>> parse_settings(std::string_view text) {
  const auto j = object_of(text);
  if (j.is_discarded()) return std::nullopt;
  std::map<std::string, std::string> out;
  for (const auto& [flag, value] : j.items()) {
    if (value.is_string()) out[flag] = value.get<std::string>();
  }
  return out;
}

std::string round_text(const Round& round) {
  nlohmann::json j;
  j["participants"] = round.participants;
  j["nproc"] = round.nproc;
  j["restarts"] = round.restarts;
  return j.dump();
}

std::optional<Round> parse_round(std::string_view text) {
  const auto j = object_of(text);
  if (j.is_discarded()) return std::nullopt;
  try {
    Round r;
    r.participants = j.at("participants").get<std::vector<std::string>>();
    r.nproc = j.at("nproc").get<std::vector<int>>();
    r.restarts = j.value("restarts", 0);
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace ddprun::rendezvous::records
