#pragma once
// The one TLS record the store writes itself: a fatal protocol_version alert, its answer to a peer
// whose first bytes are TLS on a clear connection or clear on a TLS one. OpenSSL sends no alert for
// a first record it cannot read, and a connection closed without a word is what a client retries
// (StoreClosedEarly); this alert tells it at once that the two ends do not match.
#include <cstdint>
#include <string_view>

namespace ddprun::store::tls_alert {

// Alert record (21), version 3.1, length 2: level fatal (2), protocol_version (70).
inline constexpr std::string_view kProtocolVersion{"\x15\x03\x01\x00\x02\x02\x46", 7};

// Whether a peer's first two bytes begin a TLS alert record.
constexpr bool begins_alert(uint8_t first, uint8_t second) {
  return first == 0x15 && second == 0x03;
}

}  // namespace ddprun::store::tls_alert
