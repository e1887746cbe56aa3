#include "node/probe_report.hpp"

#include <cmath>
#include <sstream>

namespace ddprun::agent {
namespace {

bool usable(double v) { return std::isfinite(v) && v >= 0; }

bool known_kind(const std::string& kind) { return kind == "cpu" || kind == "gpu"; }

}  // namespace

std::optional<ProbeReport> ProbeReport::parse(const std::string& text, int node_rank,
                                              Measured what) {
  ProbeReport r;
  r.node_rank = node_rank;
  std::istringstream lines(text);
  std::string line;
  bool computed = false;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    std::string kind, rest;
    in >> kind;
    if (kind == "compute" && what == Measured::kAll && !computed) {
      in >> r.compute_kind >> r.compute_seconds;
      if (!in || !known_kind(r.compute_kind) || !usable(r.compute_seconds)) {
        return std::nullopt;
      }
      computed = true;
    } else if (kind == "link") {
      Link l;
      std::string seconds;
      in >> l.phase >> l.partner >> seconds >> l.bytes;
      if (seconds == "failed") {
        l.completed = false;
      } else {
        std::istringstream number(seconds);
        if (!(number >> l.seconds) || !number.eof()) return std::nullopt;
      }
      if (!in || l.phase < 0 || l.partner < 0 || !usable(l.seconds) || !usable(l.bytes)) {
        return std::nullopt;
      }
      r.links.push_back(l);
    } else {
      return std::nullopt;
    }
    if (in >> rest) return std::nullopt;  // more than the line holds
  }
  if (what == Measured::kAll && !computed) return std::nullopt;
  // (A round's node check pairs every node with a partner: a report of the links only has one.)
  if (what == Measured::kLinks && r.links.empty()) return std::nullopt;
  return r;
}

ProbeReport ProbeReport::failure(int node_rank, std::string why) {
  ProbeReport r;
  r.node_rank = node_rank;
  r.failed = std::move(why);
  return r;
}

nlohmann::json ProbeReport::to_json() const {
  nlohmann::json links_json = nlohmann::json::array();
  for (const Link& l : links) {
    links_json.push_back({{"phase", l.phase},
                          {"partner", l.partner},
                          {"seconds", l.seconds},
                          {"bytes", l.bytes},
                          {"completed", l.completed}});
  }
  return {{"node_rank", node_rank},
          {"compute_kind", compute_kind},
          {"compute_seconds", compute_seconds},
          {"links", std::move(links_json)},
          {"failed", failed}};
}

std::optional<ProbeReport> ProbeReport::from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    ProbeReport r;
    r.node_rank = j.at("node_rank").get<int>();
    r.compute_kind = j.at("compute_kind").get<std::string>();
    r.compute_seconds = j.at("compute_seconds").get<double>();
    r.failed = j.at("failed").get<std::string>();
    for (const auto& l : j.at("links")) {
      r.links.push_back(Link{l.at("phase").get<int>(), l.at("partner").get<int>(),
                             l.at("seconds").get<double>(), l.at("bytes").get<double>(),
                             l.at("completed").get<bool>()});
    }
    if (r.node_rank < 0 || !usable(r.compute_seconds) ||
        (!r.compute_kind.empty() && !known_kind(r.compute_kind))) {
      return std::nullopt;
    }
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace ddprun::agent
