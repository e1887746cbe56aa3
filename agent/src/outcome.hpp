#pragma once
// What the end of this node's part in a round, or of the job, means for this node: the outcome
// the agent exits with (AgentOutcome), or that another round follows; and whether the job is in a
// crash loop (--crash_loop_attempts), by this node's account of its failed attempts or another
// node's announcement. One part of the agent's round loop (agent_run.cpp).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ddprun/agent/agent.hpp"
#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "logs/event_log.hpp"
#include "workers/worker_group.hpp"

namespace ddprun::agent {

class RunOutcomes {
 public:
  // Everything given outlives this.
  RunOutcomes(const AgentConfig& cfg, std::filesystem::path run_dir,
              std::shared_ptr<rendezvous::Rendezvous> rdzv, EventLog& events);

  // What the end of this node's attempt in `round` means: the job's outcome on this node, or
  // nullopt where another round follows (the rendezvous told of the failure or the interruption:
  // a success past the exit barrier closes the job, a failure is reported to the other nodes).
  boost::asio::awaitable<std::optional<AgentOutcome>> settle(GroupResult& r,
                                                             const rendezvous::Round& round);
  // The rendezvous said the job ended: its outcome here (`interrupted_by`: why the last round was
  // stopped from outside, for the summary where no failure was reported).
  boost::asio::awaitable<AgentOutcome> job_ended(const std::string& interrupted_by);
  // After a round that ended with another to follow (the step it resumed from, if any): whether
  // the job is in a crash loop; then its outcome here (announced to the other nodes).
  boost::asio::awaitable<std::optional<AgentOutcome>> crash_looping(
      const rendezvous::Round& round, std::optional<int64_t> resumed_from);
  // The outcome of a job stopped in a crash loop, `why`, with the attempt's `failures`.
  AgentOutcome crash_loop(const std::string& why, const std::vector<WorkerFailure>& failures);

 private:
  const AgentConfig& cfg_;
  std::filesystem::path run_dir_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  EventLog& events_;
  std::vector<std::string> failed_attempts_;  // crash_loop::signature of each ended round
};

}  // namespace ddprun::agent
