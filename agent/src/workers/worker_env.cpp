#include "workers/worker_env.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "ddprun/agent/split.hpp"

namespace ddprun::agent {
namespace {

std::string value_or(const Environment& env, const std::string& name, std::string fallback) {
  auto it = env.find(name);
  return it == env.end() ? std::move(fallback) : it->second;
}

}  // namespace

Environment worker_environment(const Environment& agent_env, const AttemptEnvironment& attempt,
                               const WorkerIdentity& id, const std::string& error_file) {
  Environment env = agent_env;
  env["RANK"] = std::to_string(id.rank);
  env["GROUP_RANK"] = std::to_string(id.group_rank);
  env["ROLE_RANK"] = std::to_string(id.role_rank);
  env["ROLE_NAME"] = attempt.role;
  env["LOCAL_WORLD_SIZE"] = std::to_string(id.local_world_size);
  env["WORLD_SIZE"] = std::to_string(id.world_size);
  env["GROUP_WORLD_SIZE"] = std::to_string(id.group_world_size);
  env["ROLE_WORLD_SIZE"] = std::to_string(id.role_world_size);
  env["MASTER_ADDR"] = attempt.master_addr;
  env["MASTER_PORT"] = std::to_string(attempt.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(attempt.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = attempt.run_id;
  env["TORCHELASTIC_USE_AGENT_STORE"] = attempt.use_agent_store ? "True" : "False";
  env["TORCHELASTIC_ERROR_FILE"] = error_file;
  // The agents' agreement alone says what to restore.
  for (const char* name :
       {"DDPRUN_CHECKPOINT_STEP", "DDPRUN_CHECKPOINT_WORLD", "DDPRUN_CHECKPOINT_RESHARD"}) {
    env.erase(name);
  }
  env["DDPRUN_CHECKPOINT_SLOT"] = std::to_string(id.local_rank);
  env["DDPRUN_CHECKPOINT_SLOTS"] = std::to_string(attempt.checkpoint_slots);
  if (attempt.checkpoint) {
    env["DDPRUN_CHECKPOINT_STEP"] = std::to_string(attempt.checkpoint->step);
    env["DDPRUN_CHECKPOINT_WORLD"] = std::to_string(attempt.checkpoint->saved_world);
    if (!attempt.checkpoint->reshard_dir.empty()) {
      env["DDPRUN_CHECKPOINT_RESHARD"] = attempt.checkpoint->reshard_dir;
    }
  }
  // torch >= 2.2's name, as torch 2.x's torchrun sets it. Torch 1.13's NCCL_ASYNC_ERROR_HANDLING is
  // only passed on from the agent's environment: newer torch warns about it on every rank.
  env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] =
      value_or(agent_env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (attempt.virtual_local_rank) {
    env["LOCAL_RANK"] = "0";
    auto visible = agent_env.find("CUDA_VISIBLE_DEVICES");
    if (visible != agent_env.end()) {
      // (As many as the workers: the command line checked. An empty one lists one empty device:
      // local rank 0 sees none, as under torchrun, and a second worker was refused.)
      const auto devices = split(visible->second);
      env["CUDA_VISIBLE_DEVICES"] = std::string(trimmed(devices.at(id.local_rank)));
    } else {
      env["CUDA_VISIBLE_DEVICES"] = std::to_string(id.local_rank);
    }
  } else {
    env["LOCAL_RANK"] = std::to_string(id.local_rank);
  }
  return env;
}

bool is_per_worker_variable(std::string_view name) {
  static constexpr std::array<std::string_view, 26> kNames{
      "RANK",
      "GROUP_RANK",
      "ROLE_RANK",
      "ROLE_NAME",
      "LOCAL_RANK",
      "LOCAL_WORLD_SIZE",
      "WORLD_SIZE",
      "GROUP_WORLD_SIZE",
      "ROLE_WORLD_SIZE",
      "MASTER_ADDR",
      "MASTER_PORT",
      "TORCHELASTIC_RESTART_COUNT",
      "TORCHELASTIC_MAX_RESTARTS",
      "TORCHELASTIC_RUN_ID",
      "TORCHELASTIC_USE_AGENT_STORE",
      "TORCHELASTIC_ERROR_FILE",
      "CUDA_VISIBLE_DEVICES",
      "DDPRUN_HEARTBEAT_FILE",
      "DDPRUN_STEP_TIMES_FILE",
      "DDPRUN_INPROCESS_FILE",
      "DDPRUN_STANDBY",
      "DDPRUN_CHECKPOINT_SLOT",
      "DDPRUN_CHECKPOINT_SLOTS",
      "DDPRUN_CHECKPOINT_STEP",
      "DDPRUN_CHECKPOINT_WORLD",
      "DDPRUN_CHECKPOINT_RESHARD",
  };
  return std::find(kNames.begin(), kNames.end(), name) != kNames.end();
}

Environment shared_part(const Environment& env) {
  Environment out;
  for (const auto& [name, value] : env) {
    if (!is_per_worker_variable(name)) out.emplace(name, value);
  }
  return out;
}

}  // namespace ddprun::agent
