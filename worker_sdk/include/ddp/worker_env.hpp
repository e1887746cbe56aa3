#pragma once
// What the launcher (ddprun or torchrun) tells a worker through its environment.
#include <map>
#include <string>

namespace ddp {

struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;   // TORCHELASTIC_RESTART_COUNT, 0 when absent
  std::string run_id;      // TORCHELASTIC_RUN_ID, "none" when absent
  std::string error_file;  // TORCHELASTIC_ERROR_FILE, empty when absent

  // Reads this process's environment. RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are
  // required (LOCAL_WORLD_SIZE defaults to WORLD_SIZE); throws ddp::EnvError naming the first
  // variable that is missing or malformed, or that contradicts another (RANK >= WORLD_SIZE).
  static WorkerEnv from_environment();
  // The same from an explicit map (tests).
  static WorkerEnv from(const std::map<std::string, std::string>& env);
};

}  // namespace ddp
