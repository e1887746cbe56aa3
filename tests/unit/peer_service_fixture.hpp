#pragma once
// What the peer copy service's tests share (checkpoint/peer_service.hpp): temporary folders,
// regions as a worker's save leaves them, services on loopback of the job "job", and a member of
// the job speaking the protocol by hand.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

#include <catch2/catch.hpp>

#include "checkpoint/peer_service.hpp"
#include "checkpoint/region_format.hpp"
#include "temp_folder.hpp"

namespace ddprun::test::peer {

using namespace ddprun::agent;
namespace fs = std::filesystem;
namespace asio = boost::asio;

struct Folder : ddprun::test::TempFolder {
  Folder() : TempFolder("ddprun-peer-test") {}
};

inline std::string payload_of(size_t bytes, char seed) {
  std::string p(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<char>(seed + i * 7);
  return p;
}

inline const uint64_t kRunTag = run_tag_of("job");

// Local rank `local`'s region in `dir`, holding global rank `rank`'s `step` in slot 0 (as a
// worker's save leaves it, in a job of 4 ranks); with `torn`, a checksum that does not match its
// bytes.
inline std::string make_region(const fs::path& dir, int local, int rank, int64_t step, size_t bytes,
                               char seed, bool torn = false) {
  const std::string payload = payload_of(bytes, seed);
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.step = step;
  rec.size = bytes;
  rec.checksum = payload_crc(payload) + (torn ? 1 : 0);
  rec.sequence = static_cast<uint64_t>(step);
  rec.world_size = 4;
  rec.rank = rank;
  rec.run_tag = kRunTag;
  std::ofstream(dir / ("rank" + std::to_string(local)), std::ios::binary)
      << region_header_for(rec, bytes, 1000) << payload;
  return payload;
}

// The payload of slot 0 of `file` (a region, or a file of the persisted layout).
inline std::string payload_of_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::optional<RegionHeader> h = parse_region_header(all);
  REQUIRE(h);
  REQUIRE(h->slot_of(h->slots[0].step) == 0);
  return all.substr(kRegionHeader, h->slots[0].size);
}

// Global rank `rank`'s step `step` as a get leaves it in `folder`.
inline fs::path fetched(const fs::path& folder, int rank, int64_t step) {
  return folder / ("step_" + std::to_string(step)) / ("rank_" + std::to_string(rank) + ".ddpckpt");
}

// A service on loopback serving the regions in `dir` of the job "job", its copies in
// `dir`/`copies`.
inline std::unique_ptr<PeerService> service(PeerAuth auth, const fs::path& dir,
                                            std::optional<uint64_t> limit = {},
                                            const char* copies = "peers") {
  return std::make_unique<PeerService>(std::move(auth), "127.0.0.1", dir / copies, limit, dir,
                                       kRunTag);
}

inline PeerAuth auth_with(const char* token) {
  PeerAuth a;
  if (token != nullptr) a.token = ddprun::store::Token(token);
  a.mac = token != nullptr;  // a job with a token of its own
  a.scope = "checkpoints/job";
  return a;
}

template <class Awaitable>
TransferReport wait(Awaitable a) {
  asio::io_context io;
  auto f = asio::co_spawn(io, std::move(a), asio::use_future);
  io.run_for(std::chrono::seconds(60));
  REQUIRE(f.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  return f.get();
}

// Stages step `step` of `ranks` into `regions`/kept, then puts it to `to`: what the replicator
// does. The stage's report where it failed.
inline TransferReport put(PeerService& from, const PeerAddress& to, const std::string& origin,
                          const fs::path& regions, const std::vector<RankSlot>& ranks, int64_t step,
                          int round = 0) {
  TransferReport staged = wait(from.stage(regions, ranks, step, regions / "kept"));
  if (!staged.ok) return staged;
  return wait(from.put(to, origin, ranks, step, regions / "kept", round));
}

using Steps = std::map<std::string, std::vector<std::vector<int64_t>>>;

// A connection to the service at `port` on loopback that has proved the job's token (as a member
// speaking the protocol by hand); its session (PeerLink::session: the two nonces) into `session`
// where given.
inline asio::ip::tcp::socket member_socket(asio::io_context& io, int port,
                                           std::string* session = nullptr) {
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
  asio::write(s, asio::buffer("DDPPEER4" + std::string(32, '\0')));
  char greeting[40];
  asio::read(s, asio::buffer(greeting));
  if (session != nullptr) *session = std::string(32, '\0') + std::string(greeting + 8, 32);
  const std::string proof = ddprun::store::auth::proof(
      ddprun::store::Token("0123456789abcdef-job"), ddprun::store::auth::Side::kClient,
      "checkpoints/job", std::string(32, '\0'), std::string(greeting + 8, 32));
  asio::write(s, asio::buffer(proof));
  char answer[33];
  asio::read(s, asio::buffer(answer));
  REQUIRE(answer[0] == 1);
  return s;
}

// Global rank 0's committed record of `step` holding `payload` (its CRC), of the job "job".
inline SlotRecord record_of(const std::string& payload, int64_t step) {
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.step = step;
  rec.size = payload.size();
  rec.checksum = payload_crc(payload);
  rec.sequence = static_cast<uint64_t>(step);
  rec.rank = 0;
  rec.run_tag = kRunTag;
  return rec;
}

// A status answer of the protocol: empty when ok, else its message.
inline std::string read_status(asio::ip::tcp::socket& s) {
  uint64_t w[2];
  asio::read(s, asio::buffer(w, sizeof w));
  std::string message(std::min<uint64_t>(w[1], 4096), '\0');
  asio::read(s, asio::buffer(message));
  return w[0] == 0 ? std::string() : message;
}

// A service of a job without a token, proving the job's secret.
inline std::unique_ptr<PeerService> service_of_a_job_without_a_token(const fs::path& dir) {
  auto s = service(auth_with(nullptr), dir);
  s->use_secret(ddprun::store::Token("0123456789abcdef-secret"));
  return s;
}

}  // namespace ddprun::test::peer
