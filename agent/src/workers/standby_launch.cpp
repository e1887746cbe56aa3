#include "workers/standby_launch.hpp"

#include <unistd.h>

#include <algorithm>
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

const StreamTarget& target_of(const WorkerLaunch& l, bool err) {
  return err ? l.spawn.err : l.spawn.out;
}

// The file worker `l`'s stream goes to ("" none).
std::string file_of(const WorkerLaunch& l, bool err) {
  const StreamTarget& target = target_of(l, err);
  if (target.kind == StreamTarget::Kind::kFile) return target.path;
  if (target.kind == StreamTarget::Kind::kPipe) return (err ? l.tee_err : l.tee_out).file;
  return {};
}

}  // namespace

ConsoleRoute console_route(const WorkerLaunch& l, bool err) {
  const TeeTarget& tee = err ? l.tee_err : l.tee_out;
  switch (target_of(l, err).kind) {
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

StandbyStream standby_stream(const std::vector<const WorkerLaunch*>& workers, bool err) {
  if (workers.empty()) return StandbyStream::kNone;
  const WorkerLaunch& first = *workers.front();
  // Its route with any prefix alike: the prefix is the worker's own.
  const auto route = [err](const WorkerLaunch& l) {
    ConsoleRoute r = console_route(l, err);
    if (!r.prefix.empty()) r.prefix = "prefixed";
    return r;
  };
  bool same = true;
  for (const WorkerLaunch* w : workers) {
    if (file_of(*w, err).empty() != file_of(first, err).empty()) return StandbyStream::kNone;
    same =
        same && target_of(*w, err).kind == target_of(first, err).kind && route(*w) == route(first);
  }
  return same ? StandbyStream::kSame : StandbyStream::kThrough;
}

WorkerLaunch standby_launch(const WorkerLaunch& sample, uint64_t number,
                            const std::string& channel_path, StandbyStream out, StandbyStream err) {
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
  for (const bool is_err : {false, true}) {
    StreamTarget& target = is_err ? l.spawn.err : l.spawn.out;
    TeeTarget& tee = is_err ? l.tee_err : l.tee_out;
    tee = is_err ? sample.tee_err : sample.tee_out;
    tee.file = beside(tee.file);
    if (target.kind == StreamTarget::Kind::kFile) target.path = beside(target.path);
    if ((is_err ? err : out) != StandbyStream::kThrough) continue;
    const ConsoleRoute console = console_route(sample, is_err);
    const std::string file = beside(file_of(sample, is_err));
    target = {StreamTarget::Kind::kPipe, {}};
    tee = {file, console.fd, console.duplicate, console.fd >= 0 && console.prefix.empty()};
  }
  return l;
}

}  // namespace ddprun::agent
