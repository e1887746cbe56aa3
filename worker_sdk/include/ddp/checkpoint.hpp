#pragma once
// Checkpoints held in memory by ddprun's agent (docs/operations.md), for C++ workers: the same
// regions as Python's ddprun.checkpoint, one per local rank in the folder the agent made
// (DDPRUN_CHECKPOINT_DIR), two slots each, a save committed (step, size, checksum) only once its
// last byte is in. A checkpoint is a list of buffers; what a C++ worker saves, a C++ worker loads.
//
//   std::vector<std::span<std::byte>> state = {as_bytes(w1), as_bytes(b1), ...};
//   if (auto step = ddp::checkpoint::load(state)) first_step = *step + 1;
//   for (...) { ...; ddp::checkpoint::save(s, state); }
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ddp::checkpoint {

// Saves the bytes of `buffers`, in order, as step `step` of this rank; returns once every byte is
// in shared memory. False (with one line on stderr, the first time) outside ddprun. Throws
// ddp::CheckpointError when the region cannot be had (a full /dev/shm, --checkpoint_memory_limit).
bool save(int64_t step, const std::vector<std::span<const std::byte>>& buffers);
bool save(int64_t step, const std::vector<std::span<std::byte>>& buffers);

// The step the agents agreed this job restores (the newest every rank holds), as this global rank
// saved it, its bytes copied into `buffers`; nullopt when there is none (a fresh start, outside
// ddprun). Where the world size changed since, each rank the saved world had gets what it saved.
// Throws ddp::CheckpointError when the saved buffers' number or sizes differ from `buffers`', the
// checksum fails, the slot is another rank's or of another world size than agreed (never loaded),
// or this rank has no counterpart in the world that saved the step.
std::optional<int64_t> load(const std::vector<std::span<std::byte>>& buffers);

}  // namespace ddp::checkpoint
