#pragma once
// The MAC that goes with a checkpoint copy between two agents where the job has a token of its own
// (peer_service.hpp), so that a copy altered on its way, or sent by someone without the token, is
// refused before it counts. The sender draws a 128-bit nonce at random for each MAC and sends it
// ahead of the bytes it covers; the MAC is GMAC (AES-256-GCM over additional data only, an IV of
// 12 zero bytes) under the copy's own key, HMAC-SHA256(key of the token for a purpose, nonce).
// A key per copy: one key of the run, used by every agent in every round, would see more MACs in
// a long job of many nodes than random 96-bit IVs allow (2^32); nonces of 128 bits repeat with
// negligible probability (2^-55 after 2^37 copies). GMAC rather than HMAC-SHA256 over the bytes
// (slot_mac.hpp, which the files of --checkpoint_dir keep): a copy crosses at the link's speed,
// and HMAC-SHA256 ran at 1.13 GB/s on one core of the development machine where this ran at
// 12.77 GB/s (scripts/bench/copy_mac.sh). Private to the agent.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "ddprun/store/auth.hpp"

namespace ddprun::agent {

class CopyMac {
 public:
  static constexpr size_t kNonceBytes = 16;
  static constexpr size_t kTagBytes = 16;

  // Under the key of `token` for `purpose` (the copies of one run, say); begun by one of the two
  // begin_ calls before add(), finish() or matches(), which throw std::logic_error otherwise.
  // Throws std::runtime_error where AES-256-GCM is not available.
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
  void check_begun() const;

  std::string key_;  // of the token for the purpose: the HMAC key of each copy's own
  bool begun_ = false;
  struct Context;
  std::unique_ptr<Context> ctx_;
};

}  // namespace ddprun::agent
