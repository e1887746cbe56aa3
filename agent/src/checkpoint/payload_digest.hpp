#pragma once
// A slot payload's content digest: XXH3's 128-bit hash of its bytes. Two agents holding the same
// step compare digests to tell that a copy need not cross the network (peer_service.hpp: a copy
// the peer holds already is linked, not sent). It says which bytes, not who wrote them: it is no
// MAC (copy_mac.hpp), and a copy's header that carries it is MAC'd where the job has a token. A
// file of the persisted layout whose bytes were digested as they were written (a kept copy,
// SlotFileWriter::record_digest) has it in its header at kSlot0DigestAt, after a marker; anything
// else there is no digest. Private to the agent.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "checkpoint/region_format.hpp"

namespace ddprun::agent {

struct PayloadDigest {
  uint64_t low = 0;
  uint64_t high = 0;

  bool operator==(const PayloadDigest&) const = default;
};

// Where a file of the persisted layout holds its payload's digest: 8 bytes of marker, then the
// digest's low and high words (little-endian). Within the header's first kDigestFieldEnd bytes.
inline constexpr size_t kSlot0DigestAt = 304;
inline constexpr size_t kDigestFieldEnd = kSlot0DigestAt + 24;
static_assert(kDigestFieldEnd <= kRegionHeaderRead);

// The digest field's 24 bytes for `digest`.
std::string digest_field(const PayloadDigest& digest);
// The digest in `header` (a file's header, at least kDigestFieldEnd bytes); nullopt: none.
std::optional<PayloadDigest> digest_in(std::string_view header);

// Whether `file`, of the persisted layout, holds the payload `rec` names as its committed slot 0:
// the same step, size, CRC and run, and `digest` in its header. False where it cannot be read.
bool holds_payload(const std::filesystem::path& file, const SlotRecord& rec,
                   const PayloadDigest& digest);

// A payload's digest, summed from its bytes in order, in pieces of any size.
class DigestSum {
 public:
  DigestSum();
  ~DigestSum();
  DigestSum(const DigestSum&) = delete;
  DigestSum& operator=(const DigestSum&) = delete;

  void add(const char* p, size_t n);
  PayloadDigest value() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ddprun::agent
