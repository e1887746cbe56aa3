#include "workers/standby_launch.hpp"

#include <filesystem>

#include "workers/worker_env.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;

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
  l.spawn = sample.spawn;
  l.spawn.env = shared_part(sample.spawn.env);
  l.spawn.env["DDPRUN_INPROCESS_FILE"] = channel_path;
  l.spawn.env["DDPRUN_STANDBY"] = "1";
  l.spawn.cpus.clear();
  for (StreamTarget* target : {&l.spawn.out, &l.spawn.err}) {
    if (target->kind == StreamTarget::Kind::kFile) target->path = beside(target->path);
  }
  l.tee_out = sample.tee_out;
  l.tee_out.file = beside(sample.tee_out.file);
  l.tee_err = sample.tee_err;
  l.tee_err.file = beside(sample.tee_err.file);
  l.prefix = "[" + name + "]:";
  return l;
}

}  // namespace ddprun::agent
