#pragma once
// The memory pages of copies dropped, held for the next stage to write over. A memory file
// system gives a new file's every page anew and zeroed, about 40% of a stage's time on this
// machine (240 MiB: 0.175-0.185 s into fresh pages, 0.105-0.110 s over pages taken before), and
// the steps a node keeps for its peer turn over every window. A file is held only where the name
// dropped was its last (a copy held for a peer as a link to a kept one shares its bytes: it stays
// whole until its own drop), and only while the spare files take at most what one stage writes
// (a waiting spare's restore room, restore_room.hpp, counts there: a replacement's first stages
// use it up before their drops are held). They lie among the kept copies
// (`keep`/.spare), so the node's budget counts them there, and room for a worker's region or for
// a peer's copy, or for the persister's staging, drops them first. Private to the agent.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace ddprun::agent {

// The folder of the spare pages under a node's kept copies `keep`.
std::filesystem::path spares_of(const std::filesystem::path& keep);

// Drops `file`: held as spare pages in `spares` where its name was its last and the spares, it
// with them, take at most `most` bytes of memory; else removed. Never throws.
void drop_to_spares(const std::filesystem::path& file, const std::filesystem::path& spares,
                    uint64_t most);

// Renames the spare file that best holds `bytes` (the smallest that takes at least that much
// memory, else the largest) to `to`, to be written over; false where there is none. Never throws.
bool take_spare(const std::filesystem::path& spares, const std::filesystem::path& to,
                uint64_t bytes);

// Makes a spare file taking at least `bytes` of memory, its pages allocated (not written) under
// `tmp` (on the spares' file system) and renamed into `spares` once whole: a waiting spare's
// restore room (restore_room.hpp). False, nothing left, where the file system has not that much
// free with a twentieth of its size to spare (looked at first: it is never filled), or `stop` was
// set meanwhile (looked at between pieces of 64 MiB). Never throws.
bool make_spare(const std::filesystem::path& spares, const std::filesystem::path& tmp,
                uint64_t bytes, const std::atomic<bool>& stop);

// Keeps, of the spare files, the smallest that holds each of `wanted` (bytes of memory, each file
// for one) and drops the others; returns those of `wanted` no file holds, and adds the memory of
// the files kept to `held`. Never throws.
std::vector<uint64_t> keep_spares_for(const std::filesystem::path& spares,
                                      const std::vector<uint64_t>& wanted, uint64_t& held);

// The memory each spare file takes, in bytes, largest first.
std::vector<uint64_t> spare_sizes(const std::filesystem::path& spares);
// The memory the spare files take, in bytes.
uint64_t spare_memory(const std::filesystem::path& spares);
// Removes every spare file; returns the bytes of memory they took.
uint64_t drop_spares(const std::filesystem::path& spares);

}  // namespace ddprun::agent
