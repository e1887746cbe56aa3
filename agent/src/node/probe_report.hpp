#pragma once
// What ddprun-node-probe measured on one node (worker_sdk/tools/node_probe), parsed once where the
// agent reads it, and carried to the other nodes as JSON. Private to the agent.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun::agent {

struct ProbeReport {
  struct Link {
    int phase = 0;
    int partner = 0;        // its node rank in the round
    double seconds = 0;     // per all-reduce
    double bytes = 0;       // reduced each time
    bool completed = true;  // false: not done within its phase's time (seconds 0)
  };
  // What the probe was asked to measure: everything, or the links only (no compute line).
  enum class Measured { kAll, kLinks };
  int node_rank = 0;
  std::string compute_kind;  // "cpu" or "gpu"; "" where the links only were measured
  double compute_seconds = 0;
  std::vector<Link> links;
  std::string failed;  // the probe did not report: why ("" when it did)

  // The probe's report file: "compute KIND SECONDS" (exactly when `what` is kAll) then "link PHASE
  // PARTNER SECONDS BYTES" lines ("failed" for SECONDS: the link's all-reduces did not complete),
  // at least one where `what` is kLinks. nullopt when it is not that (a missing, unasked-for or
  // malformed line, a negative or non-finite number).
  static std::optional<ProbeReport> parse(const std::string& text, int node_rank, Measured what);
  // A node whose probe gave nothing, and why.
  static ProbeReport failure(int node_rank, std::string why);

  nlohmann::json to_json() const;
  static std::optional<ProbeReport> from_json(const std::string& text);
};

}  // namespace ddprun::agent
