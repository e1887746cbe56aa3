#include "workers/standby_launch.hpp"

#include <unistd.h>

#include <array>
#include <filesystem>
#include <string_view>

#include "workers/worker_env.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace {

// The per-worker variables whose value is the node's, the same for every worker.
constexpr std::array<std::string_view, 6> kNodeWide{
    "CUDA_VISIBLE_DEVICES", "LOCAL_WORLD_SIZE",          "ROLE_NAME",
    "TORCHELASTIC_RUN_ID",  "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE"};

}  // namespace

ConsoleRoute console_route(const WorkerLaunch& l, bool err) {
  const StreamTarget& spawn = err ? l.spawn.err : l.spawn.out;
  const TeeTarget& tee = err ? l.tee_err : l.tee_out;
  switch (spawn.kind) {
    case StreamTarget::Kind::kPipe:
      if (tee.console_fd < 0) break;
      return {tee.console_fd, tee.raw ? std::string() : l.prefix, tee.duplicate};
    case StreamTarget::Kind::kInherit:  // straight to the agent's own descriptor, as written
      return {err ? STDERR_FILENO : STDOUT_FILENO, {}, nullptr};
    case StreamTarget::Kind::kFile:
    case StreamTarget::Kind::kDevNull:
      break;
  }
  return {};
}

WorkerLaunch standby_launch(const WorkerLaunch& sample, uint64_t number,
                            const std::string& channel_path) {
  const std::string name = "standby" + std::to_string(number);
  // A log file of the sample's (<attempt>/<local rank>/<stream>.log) as the standby's.
  const auto beside = [&name](const std::string& file) {
    if (file.empty()) return file;
    const fs::path path(file);
    const fs::path dir = path.parent_path().parent_path() / name;
    fs::create_directories(dir);
    return (dir / path.filename()).string();
  };
  WorkerLaunch l;
  l.id.local_rank = -1;
  l.id.rank = -1;
  l.prefix = "[" + name + "]:";
  l.spawn = sample.spawn;
  l.spawn.env = shared_part(sample.spawn.env);
  for (std::string_view variable : kNodeWide) {
    const auto it = sample.spawn.env.find(std::string(variable));
    if (it != sample.spawn.env.end()) l.spawn.env.insert(*it);
  }
  l.spawn.env["DDPRUN_INPROCESS_FILE"] = channel_path;
  l.spawn.env["DDPRUN_STANDBY"] = "1";
  l.spawn.cpus.clear();
  for (const bool err : {false, true}) {
    const StreamTarget& from = err ? sample.spawn.err : sample.spawn.out;
    const TeeTarget& tee = err ? sample.tee_err : sample.tee_out;
    const ConsoleRoute console = console_route(sample, err);
    TeeTarget& to = err ? l.tee_err : l.tee_out;
    to.file = beside(from.kind == StreamTarget::Kind::kFile   ? from.path
                     : from.kind == StreamTarget::Kind::kPipe ? tee.file
                                                              : std::string());
    to.console_fd = console.fd;
    to.duplicate = console.duplicate;
    to.raw = console.fd >= 0 && console.prefix.empty();
    (err ? l.spawn.err : l.spawn.out) = {StreamTarget::Kind::kPipe, {}};
  }
  return l;
}

}  // namespace ddprun::agent
