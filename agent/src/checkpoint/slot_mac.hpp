#pragma once
// The MAC of a file of --checkpoint_dir where only the job's members can make it: HMAC-SHA256 of a
// file of the region layout (its header, then its payload) under a key derived from the job's
// token and a purpose, so that a file put there by someone without the job's token, or altered
// since, is refused before it counts (the copies between agents carry copy_mac.hpp's). The CRC
// (region_format.hpp) catches accidents; this, forgeries. Private to the agent.
#include <memory>
#include <string>
#include <string_view>

#include "ddprun/store/auth.hpp"

namespace ddprun::agent {

class SlotMac {
 public:
  static constexpr size_t kBytes = 32;

  // Under the key of `token` for `purpose` (the copies of one run, say). Throws std::runtime_error
  // where HMAC-SHA256 is not available.
  SlotMac(const store::Token& token, std::string_view purpose);
  ~SlotMac();
  SlotMac(SlotMac&&) noexcept;
  SlotMac& operator=(SlotMac&&) noexcept;

  void add(std::string_view bytes);
  // The MAC of every byte added: kBytes bytes. Once.
  std::string finish();
  // Whether `mac` is the MAC of every byte added (constant time). Once, instead of finish().
  bool matches(std::string_view mac);

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

}  // namespace ddprun::agent
