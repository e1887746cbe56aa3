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
//
// `replicated`: the number of leading buffers that are the same on every rank (a data-parallel
// job's parameters and optimizer state). The node holds them once: local rank 0's slot keeps them
// with each one's CRC, and every other local rank waits for local rank 0's save of the same call
// (the same place among the process's saves with replicated buffers), checks each buffer's CRC
// against it and keeps only a reference and its other buffers. A replicated buffer that differs
// throws ddp::CheckpointError naming it; where local rank 0 saved without replicated buffers, did
// not begin within 30 s or commit within 600 s, or has saved again since, the rank keeps them
// itself (one line on stderr, once): more memory, never a wrong answer.
bool save(int64_t step, const std::vector<std::span<const std::byte>>& buffers,
          size_t replicated = 0);
bool save(int64_t step, const std::vector<std::span<std::byte>>& buffers, size_t replicated = 0);

// The step the agents agreed this job restores (the newest every rank holds), as this global rank
// saved it, its bytes copied into `buffers`; nullopt when there is none (a fresh start, outside
// ddprun). Where the world size changed since, each rank the saved world had gets what it saved.
// Throws ddp::CheckpointError when the saved buffers' number or sizes differ from `buffers`', the
// checksum fails, the slot is another rank's or of another world size than agreed (never loaded),
// replicated buffers held by local rank 0's slot are not there intact (nothing copied), or this
// rank has no counterpart in the world that saved the step.
std::optional<int64_t> load(const std::vector<std::span<std::byte>>& buffers);

}  // namespace ddp::checkpoint
