#include <fmt/format.h>

#include "command_line_parts.hpp"
#include "scheduler_env.hpp"

namespace ddprun::launcher {

void apply_scheduler(const agent::Environment& env, OptionTexts& o, LaunchConfig& c) {
  if (o.flag("head_control") || o.flag("standalone") || o.given.contains("hostfile") ||
      o.given.contains("hosts")) {
    return;
  }
  std::optional<SchedulerPlacement> p;
  try {
    p = scheduler_placement(env);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("{} (--no_slurm ignores the scheduler's variables)", e.what()));
  }
  if (!p) return;
  const bool per_process = p->per_process();
  if (per_process) {
    if (o.given.contains("nproc_per_node") && o["nproc_per_node"] != "1") {
      throw UsageError(
          fmt::format("{} started {} tasks on this node, and ddprun runs one worker per task: drop "
                      "--nproc_per_node={}, or start one task per node",
                      p->scheduler, p->tasks_on_node, o["nproc_per_node"]));
    }
    if (o.given.contains("rdzv_backend") && o["rdzv_backend"] != "static") {
      throw UsageError(fmt::format(
          "{} started {} tasks on this node: a per-process launch takes its ranks from {}, which "
          "--rdzv_backend={} would not keep",
          p->scheduler, p->tasks_on_node, p->scheduler, o["rdzv_backend"]));
    }
    o.text["nproc_per_node"] = std::string(1, '1');
    c.placement = agent::Placement{p->local_rank, p->tasks_on_node, p->node_rank, p->num_nodes};
  }
  std::vector<std::string> taken;
  const auto take = [&](const char* dest, const std::string& value) {
    if (o.fill(dest, value)) taken.push_back(fmt::format("--{}={}", dest, value));
  };
  const int nodes = per_process ? p->world_size : p->num_nodes;
  take("nnodes", std::to_string(nodes));
  // Outside an srun step the job is this node's alone, and runs as torchrun runs one node: a store
  // on a port the OS picks, so that two launches in one batch script do not meet on one port.
  if (p->in_step && (!o.given.contains("rdzv_backend") || o["rdzv_backend"] == "static")) {
    take("node_rank", std::to_string(per_process ? p->rank : p->node_rank));
    auto addr = env.find("MASTER_ADDR");
    const std::string master = addr != env.end() ? addr->second : p->first_host;
    if (master.empty() && nodes > 1 && !o.given.contains("master_addr")) {
      throw UsageError(
          fmt::format("{} does not say which host runs rank 0: give --master_addr (or MASTER_ADDR)",
                      p->scheduler));
    }
    if (!master.empty()) take("master_addr", master);
    auto port = env.find("MASTER_PORT");
    take("master_port", port != env.end() ? port->second : std::to_string(p->port));
  }
  if (p->in_step) take("rdzv_id", p->job_id);
  std::string what;
  for (const auto& t : taken) what += " " + t;
  c.scheduler_notice = fmt::format(
      "{} job {}: {}; taken from it:{}", p->scheduler, p->job_id,
      !p->in_step ? std::string("not an srun step (a batch script or salloc's shell), so this node "
                                "only: start ddprun with srun to use every node")
      : per_process ? fmt::format("{} tasks on this node, so this task runs one worker (local rank "
                                  "{}, node {} of {})",
                                  p->tasks_on_node, p->local_rank, p->node_rank, p->num_nodes)
                    : fmt::format("one task on this node, so it is node {}'s agent", p->node_rank),
      what.empty() ? " nothing (every option was given)" : what);
}

}  // namespace ddprun::launcher
