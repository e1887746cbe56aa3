#pragma once
// A rank's checkpoint region as libddp maps it (docs/region_format.md), as
// python/ddprun/checkpoint.py writes it (the agent reads the header): magic, slot size;
// slot i's record at 64 + 64 * i, the global rank that saved it at 192 + 8 * i, its run's tag at
// 208 + 8 * i, the save's duration at 256 + 8 * i, its state's digest at 328 + 8 * i; slot i's
// payload at 4096 + i * slot size.
// Private to libddp.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace ddp::checkpoint {

constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', '3'};
constexpr size_t kHeader = 4096, kAlign = 64;
constexpr size_t kRankAt = 192;    // + 8 * slot: the global rank that saved it
constexpr size_t kRunAt = 208;     // + 8 * slot: its run's tag
constexpr size_t kSaveTime = 256;  // + 8 * slot: the save's duration in microseconds
// + 8 * slot: the state's digest, bit 32 set: the CRC-32 of the payload with the structure's
// ordinal (its save's place among the process's) zeroed, so that two saves of one state have one.
constexpr size_t kStateDigestAt = 328;
constexpr uint64_t kWriting = 1, kCommitted = 2;

struct Record {  // 64 bytes at 64 + 64 * slot
  uint64_t state;
  int64_t step;
  uint64_t size;
  uint64_t checksum;
  uint64_t sequence;
  uint64_t structure_size;
  uint64_t metadata_size;  // torch.distributed.checkpoint's metadata (Python); 0 here
  uint64_t world_size;     // WORLD_SIZE at the save
};
static_assert(sizeof(Record) == 64);

inline size_t up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The CRC-32 of [p, p + n) continued from `crc` (a slot's checksum: the CRC-32 of its payload).
uint64_t crc_of(uint64_t crc, const std::byte* p, size_t n);
// The CRC of A then B, from A's CRC, B's and B's length.
uint64_t crc_combine(uint64_t a, uint64_t b, size_t b_length);
// The CRC of a tile: `n` bytes at `p` and the zeros up to the next 64-byte boundary.
uint64_t tile_crc(const std::byte* p, size_t n);

// The 64-bit FNV-1a hash of `text` (a slot's run tag).
uint64_t run_tag(const std::string& text);

std::string env_or(const char* name, const char* fallback);
int64_t env_int(const char* name, int64_t fallback);

// A region file mapped (read-write where `writable`), unmapped when destroyed.
struct Region {
  std::string path;
  size_t slot_size = 0;
  std::byte* map = nullptr;
  size_t length = 0;
  Record* record(int slot) const { return reinterpret_cast<Record*>(map + 64 + 64 * slot); }
  int64_t rank(int slot) const { return word<int64_t>(kRankAt + 8 * slot); }
  uint64_t run(int slot) const { return word<uint64_t>(kRunAt + 8 * slot); }
  std::byte* payload(int slot) const { return map + kHeader + slot * slot_size; }
  template <typename T>
  T word(size_t at) const {
    T v;
    std::memcpy(&v, map + at, sizeof v);
    return v;
  }
  ~Region();
};

// The region at `path` if its file is one (read-write, or read-only where not `writable`); null
// where there is none or it is not a region. Throws ddp::CheckpointError where it cannot be mapped.
std::unique_ptr<Region> existing_region(const std::string& path, bool writable = true);

// This worker's region's number in its agent's folder, DDPRUN_CHECKPOINT_SLOT (its local rank:
// under --virtual_local_rank LOCAL_RANK is 0 in every worker), and how many workers' regions share
// the folder, DDPRUN_CHECKPOINT_SLOTS (its agent's workers: one each under srun or mpirun).
int64_t region_slot();
int64_t region_slots();
// This worker's region in `folder`: `folder`/rank<region_slot()>.
std::string region_path(const std::string& folder);

// This process's rank's region (region_path), mapped once (again where the environment names
// another since): null until a save made it or a load found it.
Region* own_region(const std::string& folder);

// This rank's region, able to hold `payload` bytes per slot (made, or remade larger, here); the
// second member is whether it is a larger one made to replace the rank's region, which it does
// once a save into it is committed (adopt()).
std::pair<Region*, bool> region_for(const std::string& folder, size_t payload);
// A save into the larger region `grown` was committed: it takes the old one's name and place.
void adopt(Region* grown);

}  // namespace ddp::checkpoint
