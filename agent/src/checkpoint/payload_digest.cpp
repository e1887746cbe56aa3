#include "checkpoint/payload_digest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "checkpoint/digest_avx2.hpp"

namespace ddprun::agent {
namespace {

constexpr char kMarker[8] = {'D', 'D', 'P', 'X', 'X', 'H', '3', '\0'};

}  // namespace

struct DigestSum::State {
  XXH3_state_t xxh;
};

std::string digest_field(const PayloadDigest& digest) {
  std::string out(kMarker, sizeof kMarker);
  out.append(reinterpret_cast<const char*>(&digest.low), sizeof digest.low);
  out.append(reinterpret_cast<const char*>(&digest.high), sizeof digest.high);
  return out;
}

std::optional<PayloadDigest> digest_in(std::string_view header) {
  if (header.size() < kDigestFieldEnd ||
      header.substr(kSlot0DigestAt, sizeof kMarker) != std::string_view(kMarker, sizeof kMarker)) {
    return std::nullopt;
  }
  PayloadDigest d;
  std::memcpy(&d.low, header.data() + kSlot0DigestAt + 8, sizeof d.low);
  std::memcpy(&d.high, header.data() + kSlot0DigestAt + 16, sizeof d.high);
  return d;
}

bool holds_payload(const std::filesystem::path& file, const SlotRecord& rec,
                   const PayloadDigest& digest) {
  std::string header(kRegionHeaderRead, '\0');  // (the digest field within)
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool read =
      ::pread(fd, header.data(), header.size(), 0) == static_cast<ssize_t>(header.size());
  ::close(fd);
  const std::optional<RegionHeader> h = read ? parse_region_header(header) : std::nullopt;
  return h && h->slots[0].state == SlotRecord::kCommitted && h->slots[0].step == rec.step &&
         h->slots[0].size == rec.size && h->slots[0].checksum == rec.checksum &&
         h->slots[0].run_tag == rec.run_tag && digest_in(header) == digest;
}

DigestSum::DigestSum() : state_(std::make_unique<State>()) { XXH3_128bits_reset(&state_->xxh); }

DigestSum::~DigestSum() = default;

void DigestSum::add(const char* p, size_t n) {
#if defined(DDPRUN_DIGEST_AVX2)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    digest_add_avx2(&state_->xxh, p, n);
    return;
  }
#endif
  XXH3_128bits_update(&state_->xxh, p, n);
}

PayloadDigest DigestSum::value() const {
  const XXH128_hash_t h = XXH3_128bits_digest(&state_->xxh);
  return {h.low64, h.high64};
}

}  // namespace ddprun::agent
