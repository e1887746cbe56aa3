#pragma once
// Whether this node takes part: the checks that keep a node out of the job before its workers
// start (--health_check and, where GPUs are, NVML's view of them, before each round this node
// joins; --node_check, once a round formed, across its nodes) and the wait, between rounds, for
// the GPU memory of workers that ended. One part of the agent's round loop (agent_run.cpp), which
// acts on what it says; it records its events and says why in the log.
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "ddprun/agent/agent.hpp"
#include "ddprun/agent/gpu_health.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "exchanges/node_check.hpp"
#include "logs/event_log.hpp"
#include "node/containment.hpp"
#include "node/gpu_reader.hpp"
#include "node/node_probe.hpp"

namespace ddprun::agent {

class NodeAdmission {
 public:
  // Everything given outlives this; `nvml` null: no GPU to check (read off the event loop,
  // gpu_reader.hpp).
  NodeAdmission(boost::asio::io_context& io, const AgentConfig& cfg, std::filesystem::path run_dir,
                std::shared_ptr<rendezvous::Rendezvous> rdzv, EventLog& events,
                Containment& containment, std::shared_ptr<const Nvml> nvml);

  // --health_check (and the GPUs' health), before this node takes part in a round: nullopt when
  // it passes (or there is none), else the outcome of a node that stays out.
  boost::asio::awaitable<std::optional<AgentOutcome>> unhealthy();

  // What --node_check decided for a round before its workers start.
  enum class Checked { kGoOn, kThisNodeOut, kAnotherNodeOut };
  // --node_check, once `round` formed and before its workers start, where it has a member not
  // checked before: every node's probe runs, node rank 0 judges, and every node acts on the same
  // verdict. kThisNodeOut sets `out` (this node stays out, as after a failed health check);
  // kAnotherNodeOut: the round re-forms once the nodes kept out (or a verdict that never came)
  // have left it.
  boost::asio::awaitable<Checked> check_nodes(const rendezvous::Round& round,
                                              const rendezvous::WorkerStoreAddress& store,
                                              AgentOutcome& out);

  // The node check's probe run again while `round`'s workers train (the straggler check found the
  // job's steps slowed in their waits), as measurements `first_pass` and, to confirm a suspect,
  // `first_pass` + 1 (every node of the round runs the same; its links only, no compute kernel: the
  // workers' step times say how long each node computes; each link all-reduces 1 MiB, not the
  // check's 4): the verdict, or nullopt where the round ended before it came.
  // (Its arguments are copied: it may outlive its caller's, cancelled, when the round ends.)
  boost::asio::awaitable<std::optional<node_check::Verdict>> measure_again(
      rendezvous::Round round, rendezvous::WorkerStoreAddress store, int first_pass);

  // Before workers start again on this node's GPUs: waits (bounded) until none of `pids`, the
  // workers that ended, still holds GPU memory, which the driver releases after they exit.
  boost::asio::awaitable<void> gpu_memory_released(const std::vector<int>& pids);

 private:
  // When the nodes are measured: the node check's, before the workers start (compute and links),
  // or the straggler check's while they train (the links only, with a smaller buffer).
  enum class When { kBeforeWorkers, kWhileTraining };
  boost::asio::awaitable<std::optional<node_check::Verdict>> node_check_verdict(
      const rendezvous::Round& round, const rendezvous::WorkerStoreAddress& store, int first_pass,
      When when, ProbeReport& mine, std::vector<int>& unconfirmed);

  boost::asio::io_context& io_;
  const AgentConfig& cfg_;
  std::filesystem::path run_dir_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  EventLog& events_;
  Containment& containment_;
  std::optional<GpuReader> gpus_;  // nullopt: no GPU to check
};

}  // namespace ddprun::agent
