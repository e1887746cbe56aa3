// The MAC a checkpoint copy carries between agents (agent/src/checkpoint/copy_mac.hpp, GMAC)
// against the HMAC-SHA256 copies carried before it and the files of --checkpoint_dir still carry
// (slot_mac.hpp), and against one plain pass over the same bytes in memory (memcpy): GB/s of one
// core over 1 GiB of payload in 1 MiB pieces (what the peer link hands the MAC), the median of
// ROUNDS (argv[1], default 5) for each, taken in turns. The last line gives the ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/copy_mac.hpp"
#include "checkpoint/slot_mac.hpp"

namespace {

constexpr size_t kPiece = 1 << 20;
constexpr size_t kPieces = 1024;

template <typename F>
double gbps(F&& pass) {
  const auto start = std::chrono::steady_clock::now();
  pass();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return static_cast<double>(kPiece * kPieces) / took.count() / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const ddprun::store::Token token("copy-mac-bench-token-0123456789");
  std::vector<std::string> pieces(16, std::string(kPiece, '\0'));
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (size_t j = 0; j < kPiece; ++j) pieces[i][j] = static_cast<char>((i * 131 + j * 7) & 0xff);
  }
  std::string sink(kPiece, '\0');
  std::vector<double> gmac, hmac, copy;
  size_t kept = 0;  // (so that no pass is optimised away)
  for (int r = 0; r < rounds; ++r) {
    gmac.push_back(gbps([&] {
      ddprun::agent::CopyMac mac(token, "checkpoints/bench");
      mac.begin_sending();
      for (size_t i = 0; i < kPieces; ++i) mac.add(pieces[i % pieces.size()]);
      kept += static_cast<unsigned char>(mac.finish()[0]);
    }));
    hmac.push_back(gbps([&] {
      ddprun::agent::SlotMac mac(token, "checkpoints/bench");
      for (size_t i = 0; i < kPieces; ++i) mac.add(pieces[i % pieces.size()]);
      kept += static_cast<unsigned char>(mac.finish()[0]);
    }));
    copy.push_back(gbps([&] {
      for (size_t i = 0; i < kPieces; ++i) {
        std::memcpy(sink.data(), pieces[i % pieces.size()].data(), kPiece);
      }
      kept += static_cast<unsigned char>(sink[kPiece - 1]);
    }));
  }
  const double g = median(gmac), h = median(hmac), c = median(copy);
  std::printf("GMAC (copy_mac, what a copy carries)        %6.2f GB/s\n", g);
  std::printf("HMAC-SHA256 (slot_mac, what it carried)     %6.2f GB/s\n", h);
  std::printf("memcpy of the same pieces (one plain pass)   %6.2f GB/s\n", c);
  std::printf(
      "copy mac: GMAC %.1fx HMAC-SHA256's speed, %.2fx a plain pass's time "
      "(medians of %d; %zu)\n",
      g / h, c / g, rounds, kept % 2);
}
