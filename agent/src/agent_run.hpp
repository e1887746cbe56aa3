#pragma once
// The agent's part in the job once it is set up (agent.cpp): the health check, joining the
// rendezvous, then round after round of this node's workers (planned, run while the rendezvous
// watches for a reason to stop them, their failures reported or their success agreed at the exit
// barrier) until the job ends for this node; then leaving the rendezvous.
#include <filesystem>
#include <map>
#include <memory>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "checkpoint/coordinator.hpp"
#include "ddprun/agent/agent.hpp"
#include "ddprun/agent/gpu_health.hpp"
#include "ddprun/agent/numa_binding.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "job_stop.hpp"
#include "logs/event_log.hpp"
#include "node/containment.hpp"
#include "straggler_check.hpp"
#include "workers/worker_group.hpp"

namespace ddprun::agent {

// What the round loop works with, all owned by run_agent and outliving the loop.
struct AgentParts {
  const AgentConfig& cfg;
  std::filesystem::path run_dir;
  std::shared_ptr<rendezvous::Rendezvous> rdzv;
  WorkerGroup& group;
  JobStop& stop;  // the signal that stops the job, and how it goes
  EventLog& events;
  const std::map<int, CpuSet>& bindings;  // --numa-binding: local rank -> its CPUs
  boost::asio::io_context& io;
  Containment& containment;
  std::shared_ptr<const Nvml> nvml;  // null: no GPU to check
  CheckpointCoordinator& checkpoints;
  StragglerCheck& straggler;
};

// Runs the job on this node to its end; throws what the rendezvous throws (a launch error).
boost::asio::awaitable<AgentOutcome> run_job(const AgentParts& parts);

}  // namespace ddprun::agent
