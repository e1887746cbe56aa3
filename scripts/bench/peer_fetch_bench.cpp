// A lost node's restore transfer on its own: one rank's committed slot of MIB MiB (argv[1],
// default 240) fetched by one agent's checkpoint service from another's (PeerService::get, on
// loopback, in one process: the bytes read out of the sender's /dev/shm file, sent, received,
// summed and written into a new /dev/shm file, or over a spare file whose pages were allocated
// beforehand as a waiting spare holds them, restore_room.hpp), against plain TCP transfers of the
// same bytes between two threads: into one reused buffer (the link), written into a new /dev/shm
// file, and written into a /dev/shm file whose pages were allocated beforehand. Each is timed from
// its connect to its last byte kept (the fetch's time also holds its greeting and its commit, which
// the plain ones have not). Medians of ROUNDS (argv[2], default 9), the ways taking turns. `mac`
// (argv[3]) gives the job a token, so that the copy carries its MAC. The last line gives the
// ratios. (A run that is killed leaves its folder, /dev/shm/ddprun-fetch-bench-<pid>.)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "checkpoint/file_io.hpp"
#include "checkpoint/peer_service.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/spare_pages.hpp"

namespace {
namespace fs = std::filesystem;
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using ddprun::agent::Fd;

constexpr size_t kPiece = 1 << 20;  // what the plain transfers move at once

[[noreturn]] void fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "median s (fastest-slowest)"
std::string spread(const std::vector<double>& v) {
  const auto [low, high] = std::minmax_element(v.begin(), v.end());
  char out[64];
  std::snprintf(out, sizeof out, "%.3f s (%.3f-%.3f)", median(v), *low, *high);
  return out;
}

// A region holding global rank 0's step 1 (of a world of 1) in slot 0, as a worker's save leaves
// it, in `dir`.
void make_region(const fs::path& dir, size_t bytes) {
  std::string payload(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) payload[i] = static_cast<char>((i * 7 + i / 4096) & 0xff);
  ddprun::agent::SlotRecord rec;
  rec.state = ddprun::agent::SlotRecord::kCommitted;
  rec.step = 1;
  rec.size = bytes;
  rec.checksum = ddprun::agent::payload_crc(payload);
  rec.sequence = 1;
  rec.world_size = 1;
  rec.rank = 0;
  rec.run_tag = ddprun::agent::run_tag_of("bench");
  std::ofstream(dir / "rank0", std::ios::binary)
      << ddprun::agent::region_header_for(rec, bytes, 1000) << payload;
}

// How a plain transfer's receiver keeps the bytes.
enum class Into { kBuffer, kNewFile, kAllocatedFile };

// Seconds of one plain TCP transfer of `bytes` on loopback, from the connect to the last byte
// kept (as the fetch's time runs from its connect to its commit); `file` is removed afterwards.
double plain_transfer(size_t bytes, Into into, const fs::path& file) {
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  if (listener.fd < 0 || ::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listener.fd, 1) != 0 ||
      ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&a), &length) != 0) {
    fail("a listening socket");
  }
  struct RemovedFile {
    const fs::path& path;
    ~RemovedFile() {
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  } removed{file};
  Fd out(-1);
  if (into != Into::kBuffer) {
    out.fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (out.fd < 0) fail(file.string());
    if (into == Into::kAllocatedFile) {
      if (const int e = ::posix_fallocate(out.fd, 0, static_cast<off_t>(bytes)); e != 0) {
        errno = e;
        fail("posix_fallocate " + file.string());
      }
    }
  }
  // (Nothing throws from here until the sender is joined.)
  const Clock::time_point start = Clock::now();
  std::thread sender([&] {
    Fd s(::socket(AF_INET, SOCK_STREAM, 0));
    const int one = 1;
    ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    std::string piece(kPiece, '\1');
    for (size_t sent = 0; sent < bytes;) {
      const ssize_t n = ::write(s.fd, piece.data(), std::min(kPiece, bytes - sent));
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  });
  Fd c(::accept(listener.fd, nullptr, nullptr));
  const char* error = c.fd < 0 ? "accept" : nullptr;
  std::string buffer(kPiece, '\0');
  for (size_t got = 0; error == nullptr && got < bytes;) {
    const ssize_t n = ::read(c.fd, buffer.data(), std::min(kPiece, bytes - got));
    if (n <= 0) {
      error = "a plain transfer ended early";
    } else if (out.fd >= 0 && ::pwrite(out.fd, buffer.data(), static_cast<size_t>(n),
                                       static_cast<off_t>(got)) != n) {
      error = "pwrite";
    } else {
      got += static_cast<size_t>(n);
    }
  }
  const std::chrono::duration<double> took = Clock::now() - start;
  ::close(std::exchange(c.fd, -1));         // (a sender still writing fails, and ends)
  ::close(std::exchange(listener.fd, -1));  // (one never accepted is reset: its sender ends)
  sender.join();
  if (error != nullptr) throw std::runtime_error(error);
  return took.count();
}

}  // namespace

int main(int argc, char** argv) try {
  const size_t mib = argc > 1 ? std::max(1, std::atoi(argv[1])) : 240;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 9;
  const bool mac = argc > 3 && std::string(argv[3]) == "mac";
  const size_t bytes = mib << 20;
  const fs::path root = fs::path("/dev/shm") / ("ddprun-fetch-bench-" + std::to_string(getpid()));
  fs::create_directories(root / "sender");
  fs::create_directories(root / "receiver");
  struct Removed {
    fs::path path;
    ~Removed() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } removed{root};
  make_region(root / "sender", bytes);

  ddprun::agent::PeerAuth auth;
  auth.token = ddprun::store::Token("peer-fetch-bench-secret-0123456789");
  auth.mac = mac;
  auth.scope = "checkpoints/bench";
  const uint64_t tag = ddprun::agent::run_tag_of("bench");
  ddprun::agent::PeerService sender(auth, "127.0.0.1", root / "sender" / "peers", std::nullopt,
                                    root / "sender", tag);
  ddprun::agent::PeerService receiver(auth, "127.0.0.1", root / "receiver" / "peers", std::nullopt,
                                      root / "receiver", tag);
  const ddprun::agent::PeerAddress from{"127.0.0.1", sender.port()};

  // Seconds of one fetch into a folder of the receiver's; `over_spare`: whether its payload is to
  // go over the receiver's spare pages.
  const auto fetch_once = [&](const fs::path& folder, bool over_spare) {
    asio::io_context io;
    auto done = asio::co_spawn(io, receiver.get(from, {{0, 1}}, 1, folder), asio::use_future);
    io.run_for(std::chrono::seconds(120));
    if (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      throw std::runtime_error("the fetch did not end in 120 s");
    }
    const ddprun::agent::TransferReport report = done.get();
    if (!report.ok || report.bytes != bytes) {
      throw std::runtime_error("the fetch failed: " + report.detail);
    }
    if (report.over_held_pages != (over_spare ? bytes : 0)) {
      throw std::runtime_error("the fetch did not write where it was meant to");
    }
    fs::remove_all(folder);
    return report.took.count();
  };
  // The receiver's spare pages, as a spare holds them for a restore (restore_room.hpp).
  const fs::path spares = ddprun::agent::spares_of(root / "receiver" / "kept");
  fs::create_directories(root / "receiver" / "kept");
  const std::atomic<bool> go{false};
  std::vector<double> fetch, over_spare, link, new_file, allocated;
  for (int r = 0; r < rounds; ++r) {
    fetch.push_back(fetch_once(root / "receiver" / ("restore" + std::to_string(r)), false));
    if (!ddprun::agent::make_spare(spares, root / "receiver" / "kept" / ".room.tmp",
                                   ddprun::agent::kRegionHeader + bytes, go)) {
      throw std::runtime_error("no room in /dev/shm for a spare file of the slot's size");
    }
    over_spare.push_back(fetch_once(root / "receiver" / ("spare" + std::to_string(r)), true));
    link.push_back(plain_transfer(bytes, Into::kBuffer, {}));
    new_file.push_back(plain_transfer(bytes, Into::kNewFile, root / "plain"));
    allocated.push_back(plain_transfer(bytes, Into::kAllocatedFile, root / "plain"));
  }
  const double f = median(fetch), s = median(over_spare), l = median(link), n = median(new_file),
               a = median(allocated);
  std::printf("%zu MiB, medians of %d%s:\n", mib, rounds, mac ? " (the copy MAC'd)" : "");
  std::printf("  the fetch (PeerService::get) into new pages       %s\n", spread(fetch).c_str());
  std::printf("  the fetch over a spare's pages held beforehand    %s\n",
              spread(over_spare).c_str());
  std::printf("  a plain transfer into one buffer (the link)       %s\n", spread(link).c_str());
  std::printf("  a plain transfer written into a new /dev/shm file %s\n", spread(new_file).c_str());
  std::printf("  the same into pages allocated beforehand          %s\n",
              spread(allocated).c_str());
  std::printf(
      "peer fetch: over a spare's pages %.2fx the link (target 2x), into new pages %.2fx; a "
      "plain transfer into new pages %.2fx, into pages allocated beforehand %.2fx\n",
      s / l, f / l, n / l, a / l);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "peer_fetch_bench: %s\n", e.what());
  return 1;
}
