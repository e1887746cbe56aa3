#pragma once
// `ddprun status --rdzv_endpoint=HOST:PORT --rdzv_id=ID [--rdzv_backend=c10d|etcd-v3|static]
// [--rdzv_conf=...] [--json]`: a live job as its rendezvous store holds it, read without joining
// it: the round, the world size, each node (host, node rank, workers, ranks, since when, its
// checkpoints), spares,
// restarts used of the budget, the last failure's root cause, whether the job is closed.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/agent/environment.hpp"
#include "ddprun/rendezvous/job_status.hpp"

namespace ddprun::launcher {

// Runs the subcommand (args: what follows "status"); returns the exit status: 0 shown, 2 usage
// error, 3 the store cannot be read or holds no such job.
int run_status(const std::vector<std::string>& args, const agent::Environment& env);

// The JSON object --json prints: run_id, backend, found, round, forming, world_size, nodes,
// spares, restarts, max_restarts, nnodes, closed, closed_reason, last_failure (null or the root
// cause: rank, local_rank, host, exitcode or signal, time_ms, message). Each node also has
// checkpoints: null, or its agent's account (per rank its newest in-memory step and that save's
// seconds, the bytes held, the newest step persisted and that copy's seconds).
nlohmann::json status_json(const rendezvous::JobStatus& s, const std::string& run_id,
                           const std::string& backend);
// The readable table printed without --json.
std::string status_table(const rendezvous::JobStatus& s, const std::string& run_id,
                         const std::string& where);

}  // namespace ddprun::launcher
