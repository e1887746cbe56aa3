#include "checkpoint/regions.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "ddprun/store/metrics_server.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "DDPCKPT1";
constexpr size_t kRecords = 64;     // slot i's record at 64 + 64 * i
constexpr size_t kRecordSize = 64;  // state, step, size, checksum, sequence, structure size
constexpr uint64_t kCommitted = 2;

uint64_t u64_at(const std::string& s, size_t offset) {
  uint64_t v = 0;
  std::memcpy(&v, s.data() + offset, sizeof v);  // little-endian, as written (x86-64, arm64)
  return v;
}

}  // namespace

CheckpointRegions::CheckpointRegions(const std::string& run_id) {
  const char* base = std::getenv("DDPRUN_SHM_DIR");
  const fs::path dir = base != nullptr && *base != '\0' ? fs::path(base)
                       : fs::exists("/dev/shm")         ? fs::path("/dev/shm")
                                                        : fs::temp_directory_path();
  std::string name = (dir / ("ddprun-checkpoints-" + run_id + "-XXXXXX")).string();
  if (::mkdtemp(name.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(),
                            "cannot make the checkpoint folder " + name);
  }
  path_ = std::move(name);  // mkdtemp makes it 0700
}

CheckpointRegions::~CheckpointRegions() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

std::vector<int64_t> CheckpointRegions::committed_steps(const std::string& header) {
  std::vector<std::pair<uint64_t, int64_t>> committed;  // (sequence, step)
  if (header.size() < kRecords + 2 * kRecordSize || header.compare(0, 8, kMagic) != 0) return {};
  for (size_t slot = 0; slot < 2; ++slot) {
    const size_t at = kRecords + slot * kRecordSize;
    if (u64_at(header, at) != kCommitted) continue;
    committed.emplace_back(u64_at(header, at + 32), static_cast<int64_t>(u64_at(header, at + 8)));
  }
  std::sort(committed.begin(), committed.end());
  std::vector<int64_t> out;
  for (const auto& [sequence, step] : committed) out.push_back(step);
  return out;
}

std::string CheckpointRegions::metrics(int nproc) const {
  std::string out = store::prometheus_sample(
      "ddprun_checkpoint_bytes", "gauge",
      "Bytes this node's in-memory checkpoint regions take (ddprun.checkpoint).",
      static_cast<double>(bytes_held()));
  for (int i = 0; i < nproc; ++i) {
    const std::vector<int64_t> steps = steps_held(i);
    out += store::prometheus_sample(
        "ddprun_checkpoint_step", "gauge",
        i == 0 ? "Each local rank's newest committed in-memory checkpoint (-1: none)." : "",
        steps.empty() ? -1.0 : static_cast<double>(steps.back()),
        "local_rank=\"" + std::to_string(i) + "\"");
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
  std::ifstream in(fs::path(path_) / ("rank" + std::to_string(local_rank)), std::ios::binary);
  std::string header(kRecords + 2 * kRecordSize, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header.size()))) return {};
  return committed_steps(header);
}

}  // namespace ddprun::agent
