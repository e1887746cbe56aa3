#include "checkpoint/region_format.hpp"

#include <cstring>

#include <libdeflate.h>

namespace ddprun::agent {
namespace {

constexpr std::string_view kMagic = "DDPCKPT3";
constexpr std::string_view kWordSumMagic = "DDPCKPT2";  // checked by the sum of its words
constexpr std::string_view kFirstMagic = "DDPCKPT1";    // that, and no rank recorded
constexpr size_t kRanks = 192;                          // slot i's global rank at 192 + 8 * i
constexpr size_t kRunTags = 208;                        // slot i's run tag at 208 + 8 * i
constexpr size_t kSaveTimes = 256;                      // slot i's save time at 256 + 8 * i
constexpr size_t kStateDigests = 328;                   // slot i's state digest at 328 + 8 * i
static_assert(kStateDigests + 16 <= kRegionHeaderRead);

uint64_t u64_at(std::string_view s, size_t offset) {
  uint64_t v = 0;
  std::memcpy(&v, s.data() + offset, sizeof v);  // little-endian, as written (x86-64, arm64)
  return v;
}

void put(std::string& s, size_t offset, uint64_t v) {
  std::memcpy(s.data() + offset, &v, sizeof v);
}

}  // namespace

std::optional<RegionHeader> parse_region_header(std::string_view bytes) {
  if (bytes.size() < kRegionHeaderRead) return std::nullopt;
  const std::string_view magic = bytes.substr(0, 8);
  const bool ranked = magic == kMagic || magic == kWordSumMagic;
  if (!ranked && magic != kFirstMagic) return std::nullopt;
  RegionHeader h;
  h.slot_size = u64_at(bytes, 8);
  for (size_t i = 0; i < 2; ++i) {
    const size_t at = slot_record_at(i);
    SlotRecord& r = h.slots[i];
    r.state = u64_at(bytes, at);
    r.step = static_cast<int64_t>(u64_at(bytes, at + 8));
    r.size = u64_at(bytes, at + 16);
    r.checksum = u64_at(bytes, at + 24);
    r.sequence = u64_at(bytes, at + 32);
    r.structure_size = u64_at(bytes, at + 40);
    r.metadata_size = u64_at(bytes, at + 48);
    r.world_size = u64_at(bytes, at + 56);
    r.sum_kind = magic == kMagic ? PayloadSumKind::kCrc32 : PayloadSumKind::kWordSum;
    if (ranked) {
      r.rank = static_cast<int64_t>(u64_at(bytes, kRanks + 8 * i));
      r.run_tag = u64_at(bytes, kRunTags + 8 * i);
      r.state_digest = u64_at(bytes, kStateDigests + 8 * i);
    }
    h.save_micros[i] = u64_at(bytes, kSaveTimes + 8 * i);
  }
  return h;
}

int RegionHeader::newest_committed() const {
  int newest = -1;
  for (int i = 0; i < 2; ++i) {
    if (slots[i].state != SlotRecord::kCommitted) continue;
    if (newest < 0 || slots[i].sequence > slots[newest].sequence) newest = i;
  }
  return newest;
}

int RegionHeader::slot_of(int64_t step) const {
  int found = -1;
  for (int i = 0; i < 2; ++i) {
    if (slots[i].state != SlotRecord::kCommitted || slots[i].step != step) continue;
    if (found < 0 || slots[i].sequence > slots[found].sequence) found = i;
  }
  return found;
}

std::vector<int64_t> RegionHeader::committed_steps() const {
  std::vector<int64_t> out;
  const int newest = newest_committed();
  if (newest < 0) return out;
  if (slots[1 - newest].state == SlotRecord::kCommitted) out.push_back(slots[1 - newest].step);
  out.push_back(slots[newest].step);
  return out;
}

std::string region_header_for(const SlotRecord& r, uint64_t slot_size, uint64_t save_micros) {
  std::string h(kRegionHeader, '\0');
  h.replace(0, kMagic.size(), kMagic);
  put(h, 8, slot_size);
  const uint64_t fields[] = {r.state,         static_cast<uint64_t>(r.step),
                             r.size,          r.checksum,
                             r.sequence,      r.structure_size,
                             r.metadata_size, r.world_size};
  for (size_t i = 0; i < 8; ++i) put(h, slot_record_at(0) + 8 * i, fields[i]);
  put(h, kRanks, static_cast<uint64_t>(r.rank));
  put(h, kRunTags, r.run_tag);
  put(h, kSaveTimes, save_micros);
  put(h, kStateDigests, r.state_digest);
  return h;
}

uint64_t run_tag_of(std::string_view run_id) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (const char c : run_id) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  return h;
}

void PayloadSum::add(const char* p, size_t n) {
  if (kind_ == PayloadSumKind::kWordSum) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      value_ += w;
    }
    return;
  }
  value_ = libdeflate_crc32(static_cast<uint32_t>(value_), p, n);
}

uint64_t payload_crc(std::string_view bytes) {
  PayloadSum sum;
  sum.add(bytes.data(), bytes.size());
  return sum.value();
}

}  // namespace ddprun::agent
