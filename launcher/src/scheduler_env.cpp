#include "scheduler_env.hpp"

#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

#include "hostlist.hpp"

namespace ddprun::launcher {
namespace {

const std::string* find(const agent::Environment& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// The first of `names` that is set, as a non-negative integer; `fallback` when none is.
int number(const agent::Environment& env, std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    const std::string* v = find(env, name);
    if (v == nullptr) continue;
    int out = -1;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
    if (ec != std::errc() || end != v->data() + v->size() || out < 0) {
      throw std::invalid_argument(fmt::format("{}='{}' is not a non-negative integer", name, *v));
    }
    return out;
  }
  return fallback;
}

const std::string* first_set(const agent::Environment& env,
                             std::initializer_list<const char*> names, const char** which) {
  for (const char* name : names) {
    if (const std::string* v = find(env, name); v != nullptr && !v->empty()) {
      *which = name;
      return v;
    }
  }
  return nullptr;
}

// FNV-1a: the same on every node for the same job, whatever the platform.
int derived_port(const std::string& job) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : job) h = (h ^ ch) * 1099511628211ull;
  return 20000 + static_cast<int>(h % 10000);
}

void check_ranks(const SchedulerPlacement& p, const char* what) {
  if (p.num_nodes < 1 || p.node_rank >= p.num_nodes || p.tasks_on_node < 1 ||
      p.local_rank >= p.tasks_on_node || p.world_size < 1 || p.rank >= p.world_size) {
    throw std::invalid_argument(fmt::format(
        "{}'s variables contradict each other: node {} of {}, task {} of {} on the node, rank {} "
        "of {}",
        what, p.node_rank, p.num_nodes, p.local_rank, p.tasks_on_node, p.rank, p.world_size));
  }
}

SchedulerPlacement slurm(const agent::Environment& env) {
  SchedulerPlacement p;
  p.scheduler = "Slurm";
  p.job_id = *find(env, "SLURM_JOB_ID");
  const std::string* step = find(env, "SLURM_STEP_ID");
  if (step == nullptr) {
    // A batch script (sbatch) or salloc's shell: one process on the first node, not an srun step
    // on every node. Taking the allocation's node count would wait for nodes that never come.
    p.in_step = false;
    return p;
  }
  p.num_nodes = number(env, {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"}, 1);
  p.node_rank = number(env, {"SLURM_NODEID"}, 0);
  const char* which = nullptr;
  if (const std::string* counts =
          first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &which)) {
    std::vector<int> per_node;
    try {
      per_node = expand_tasks_per_node(*counts);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", which, e.what()));
    }
    if (static_cast<size_t>(p.node_rank) >= per_node.size()) {
      throw std::invalid_argument(
          fmt::format("{}='{}' has no entry for SLURM_NODEID={}", which, *counts, p.node_rank));
    }
    p.tasks_on_node = per_node[p.node_rank];
  }
  p.local_rank = number(env, {"SLURM_LOCALID"}, 0);
  p.rank = number(env, {"SLURM_PROCID"}, 0);
  p.world_size = number(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, p.num_nodes);
  if (const std::string* list =
          first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &which)) {
    try {
      p.first_host = expand_hostlist(*list).front();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", which, e.what()));
    }
  }
  p.port = derived_port(p.job_id + "." + *step);
  check_ranks(p, "Slurm");
  return p;
}

SchedulerPlacement open_mpi(const agent::Environment& env) {
  SchedulerPlacement p;
  p.scheduler = "Open MPI";
  p.world_size = number(env, {"OMPI_COMM_WORLD_SIZE"}, 1);
  p.rank = number(env, {"OMPI_COMM_WORLD_RANK"}, 0);
  p.local_rank = number(env, {"OMPI_COMM_WORLD_LOCAL_RANK"}, 0);
  p.tasks_on_node = number(env, {"OMPI_COMM_WORLD_LOCAL_SIZE"}, 1);
  // Open MPI names neither the node's index (OMPI_COMM_WORLD_NODE_RANK is the process's rank
  // among all processes on its node) nor the node count: with its default by-slot mapping and the
  // same number of processes on each node, ranks fill the nodes in order.
  if (p.tasks_on_node < 1 || p.local_rank > p.rank) {
    throw std::invalid_argument(
        fmt::format("Open MPI's variables contradict each other: local rank {} of {}, rank {}",
                    p.local_rank, p.tasks_on_node, p.rank));
  }
  p.node_rank = (p.rank - p.local_rank) / p.tasks_on_node;
  p.num_nodes = (p.world_size + p.tasks_on_node - 1) / p.tasks_on_node;
  const char* which = nullptr;
  const std::string* job = first_set(
      env, {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"}, &which);
  p.job_id = job ? *job : "mpirun";
  p.port = derived_port(p.job_id);
  if (p.num_nodes == 1) {
    p.first_host = "127.0.0.1";
  } else if (const std::string* list =
                 first_set(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &which)) {
    // mpirun inside a Slurm allocation: rank 0 runs on the allocation's first node.
    try {
      p.first_host = expand_hostlist(*list).front();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", which, e.what()));
    }
  }
  check_ranks(p, "Open MPI");
  return p;
}

}  // namespace

std::optional<SchedulerPlacement> scheduler_placement(const agent::Environment& env) {
  if (find(env, "OMPI_COMM_WORLD_SIZE") != nullptr) return open_mpi(env);
  if (find(env, "SLURM_JOB_ID") != nullptr) return slurm(env);
  return std::nullopt;
}

}  // namespace ddprun::launcher
