#include "ddp/worker_env.hpp"

#include <unistd.h>

#include <charconv>

#include "ddp/errors.hpp"

namespace ddp {
namespace {

using Env = std::map<std::string, std::string>;

const std::string* find(const Env& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

const std::string& require(const Env& env, const char* name) {
  const std::string* v = find(env, name);
  if (v == nullptr || v->empty()) {
    throw EnvError(std::string(name) + " is not set: start this program with ddprun or torchrun");
  }
  return *v;
}

int to_int(const std::string& text, const char* name, int min, int max) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < min || v > max) {
    throw EnvError(std::string(name) + "='" + text + "' is not an integer in [" +
                   std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

}  // namespace

WorkerEnv WorkerEnv::from(const Env& env) {
  constexpr int kMax = 1 << 30;
  WorkerEnv w;
  w.world_size = to_int(require(env, "WORLD_SIZE"), "WORLD_SIZE", 1, kMax);
  w.rank = to_int(require(env, "RANK"), "RANK", 0, kMax);
  if (w.rank >= w.world_size) {
    throw EnvError("RANK=" + std::to_string(w.rank) +
                   " is not below WORLD_SIZE=" + std::to_string(w.world_size));
  }
  w.local_rank = to_int(require(env, "LOCAL_RANK"), "LOCAL_RANK", 0, kMax);
  const std::string* lws = find(env, "LOCAL_WORLD_SIZE");
  w.local_world_size = lws ? to_int(*lws, "LOCAL_WORLD_SIZE", 1, kMax) : w.world_size;
  w.master_addr = require(env, "MASTER_ADDR");
  w.master_port = to_int(require(env, "MASTER_PORT"), "MASTER_PORT", 1, 65535);
  if (const std::string* rc = find(env, "TORCHELASTIC_RESTART_COUNT")) {
    w.restart_count = to_int(*rc, "TORCHELASTIC_RESTART_COUNT", 0, kMax);
  }
  const std::string* id = find(env, "TORCHELASTIC_RUN_ID");
  w.run_id = id ? *id : "none";
  if (const std::string* f = find(env, "TORCHELASTIC_ERROR_FILE")) w.error_file = *f;
  return w;
}

WorkerEnv WorkerEnv::from_environment() {
  Env env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return from(env);
}

}  // namespace ddp
