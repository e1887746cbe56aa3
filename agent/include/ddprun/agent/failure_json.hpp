#pragma once
// Worker failures as the JSON the coordinators store for other nodes to read.
#include <string>
#include <vector>

#include "ddprun/agent/failure_summary.hpp"

namespace ddprun::agent {

std::string failures_to_json(const std::vector<WorkerFailure>& failures);
// Unparseable text gives no failures.
std::vector<WorkerFailure> failures_from_json(const std::string& text);

}  // namespace ddprun::agent
