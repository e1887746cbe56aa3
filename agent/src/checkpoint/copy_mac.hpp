#pragma once
// The MAC that goes with a checkpoint copy between two agents where the job has a token of its own
// (peer_service.hpp): GMAC (AES-256-GCM over additional data only) under a key derived from the
// token and a purpose, with a 96-bit nonce the sender draws at random for each MAC and sends ahead
// of the bytes it covers. A copy altered on its way, or one sent by someone without the token, is
// refused before it counts. GMAC rather than HMAC-SHA256 (slot_mac.hpp, which the files of
// --checkpoint_dir keep): a copy crosses at the link's speed, and SHA-256 ran at about 1-2 GB/s on
// one core at each end where GHASH runs at about 11-14 GB/s (measured in docs/performance.md).
// Random nonces: a key sees far fewer than 2^32 MACs in a job's life, so a nonce repeats with
// negligible probability. Private to the agent.
#include <memory>
#include <string>
#include <string_view>

#include "ddprun/store/auth.hpp"

namespace ddprun::agent {

class CopyMac {
 public:
  static constexpr size_t kNonceBytes = 12;
  static constexpr size_t kTagBytes = 16;

  // Under the key of `token` for `purpose` (the copies of one run, say); begun by one of the two
  // begin_ calls before the first add(). Throws std::runtime_error where AES-256-GCM is not
  // available.
  CopyMac(const store::Token& token, std::string_view purpose);
  ~CopyMac();
  CopyMac(CopyMac&&) noexcept;
  CopyMac& operator=(CopyMac&&) noexcept;

  // To send: draws a fresh nonce and returns it (kNonceBytes bytes, for the other end). Throws
  // std::runtime_error where the system has no randomness.
  std::string begin_sending();
  // To check: the nonce the sender drew. Throws std::runtime_error where it is not kNonceBytes
  // bytes.
  void begin_checking(std::string_view nonce);

  void add(std::string_view bytes);
  // The MAC of every byte added: kTagBytes bytes. Once.
  std::string finish();
  // Whether `tag` is the MAC of every byte added (constant time). Once, instead of finish().
  bool matches(std::string_view tag);

 private:
  void begin(std::string_view nonce);

  std::string key_;
  struct Context;
  std::unique_ptr<Context> ctx_;
};

}  // namespace ddprun::agent
