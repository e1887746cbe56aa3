#pragma once
// How many GPUs a CUDA program started by this launcher would see, for --nproc_per_node=gpu|auto:
// the same number torchrun gets from torch.cuda.device_count().
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// The GPUs' UUIDs ("GPU-..."), as the driver publishes them in /proc/driver/nvidia/gpus; empty
// where it does not.
std::vector<std::string> gpu_uuids();

// `physical` GPUs narrowed by CUDA_VISIBLE_DEVICES (nullopt: unset, all of them) as the CUDA
// runtime reads it (measured on a GPU: scripts/gpu-test.sh compares with torch). The entries are
// comma-separated, all ordinals or all UUIDs (GPU-... prefixes, MIG-...); the list ends at the
// first entry that names no device: empty, not a number, negative, out of range, a UUID prefix
// matching none of `uuids` (when known) or of the other kind. An entry named twice makes no
// device visible.
int visible_gpu_count(std::optional<std::string_view> cuda_visible_devices, int physical,
                      const std::vector<std::string>& uuids = {});

}  // namespace ddprun::launcher
