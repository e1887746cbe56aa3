#include "checkpoint/regions.hpp"

#include <filesystem>
#include <utility>

#include "checkpoint/slot_copy.hpp"
#include "ddprun/store/metrics_server.hpp"
#include "node/owned_folders.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;

CheckpointRegions::CheckpointRegions(const std::string& run_id) {
  path_ = make_owned_folder(memory_folder(), kCheckpointFolders + run_id + "-");
}

CheckpointRegions::~CheckpointRegions() { remove_owned_folder(path_); }

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
