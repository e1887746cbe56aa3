#include "checkpoint/regions.hpp"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include <spdlog/spdlog.h>

#include "checkpoint/orphans.hpp"
#include "checkpoint/slot_copy.hpp"
#include "ddprun/store/metrics_server.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;

CheckpointRegions::CheckpointRegions(const std::string& run_id) {
  const char* base = std::getenv("DDPRUN_SHM_DIR");
  const fs::path dir = base != nullptr && *base != '\0' ? fs::path(base)
                       : fs::exists("/dev/shm")         ? fs::path("/dev/shm")
                                                        : fs::temp_directory_path();
  const OrphanedFolders orphans = remove_orphaned_checkpoint_folders(dir);
  for (const std::string& orphan : orphans.removed) {
    spdlog::info("removed {}: the checkpoint folder of an agent no longer running", orphan);
  }
  for (const auto& [orphan, uid] : orphans.of_other_users) {
    spdlog::warn(
        "{}: the checkpoint folder of an agent no longer running, of another user (uid {}), "
        "holds memory; ddprun removes only its own user's: that user or root can remove it",
        orphan, uid);
  }
  std::string name = (dir / ("ddprun-checkpoints-" + run_id + "-XXXXXX")).string();
  if (::mkdtemp(name.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(),
                            "cannot make the checkpoint folder " + name);
  }
  path_ = std::move(name);  // mkdtemp makes it 0700
  claim_checkpoint_folder(path_);
}

CheckpointRegions::~CheckpointRegions() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

std::vector<int64_t> CheckpointRegions::committed_steps(const std::string& header) {
  const std::optional<RegionHeader> h = parse_region_header(header);
  return h ? h->committed_steps() : std::vector<int64_t>{};
}

std::optional<RegionHeader> CheckpointRegions::header(int local_rank) const {
  return read_region_header(fs::path(path_) / ("rank" + std::to_string(local_rank)));
}

std::string CheckpointRegions::metrics(const std::vector<int>& local_ranks) const {
  std::string out = store::prometheus_sample(
      "ddprun_checkpoint_bytes", "gauge",
      "Bytes this node's in-memory checkpoint regions take (ddprun.checkpoint).",
      static_cast<double>(bytes_held()));
  std::vector<std::optional<RegionHeader>> headers;
  for (int local : local_ranks) headers.push_back(header(local));
  const auto newest = [&headers](size_t i) {
    return headers[i] ? headers[i]->newest_committed() : -1;
  };
  const auto label = [&local_ranks](size_t i) {
    return "local_rank=\"" + std::to_string(local_ranks[i]) + "\"";
  };
  for (size_t i = 0; i < local_ranks.size(); ++i) {
    out += store::prometheus_sample(
        "ddprun_checkpoint_step", "gauge",
        i == 0 ? "Each local rank's newest committed in-memory checkpoint (-1: none)." : "",
        newest(i) < 0 ? -1.0 : static_cast<double>(headers[i]->slots[newest(i)].step), label(i));
  }
  for (size_t i = 0; i < local_ranks.size(); ++i) {
    out += store::prometheus_sample(
        "ddprun_checkpoint_save_seconds", "gauge",
        i == 0 ? "How long each local rank's newest in-memory save took, as the worker saw it."
               : "",
        newest(i) < 0 ? 0.0 : static_cast<double>(headers[i]->save_micros[newest(i)]) / 1e6,
        label(i));
  }
  return out;
}

uint64_t CheckpointRegions::bytes_held() const {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path_, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);  // not the modules' folder
  }
  return total;
}

std::vector<int64_t> CheckpointRegions::steps_held(int local_rank) const {
  const std::optional<RegionHeader> h = header(local_rank);
  return h ? h->committed_steps() : std::vector<int64_t>{};
}

}  // namespace ddprun::agent
