// Heavy clients against a TCPStore server (ddprund or torch's), and what they cost everyone else.
//
//   heavy_client_load latency --port P --dialect legacy|modern --load nonreader|readers --seconds S
//       Stores a 60 MB value, starts the load (nonreader: one connection sends 50 GETs of it and
//       never reads; readers: 8 connections GET it in a loop), then times small set+get round trips
//       from another connection for S seconds. Prints "p50_ms p99_ms max_ms" ("inf inf inf" when
//       one takes longer than 10 s: the server is stuck behind the load).
//   heavy_client_load hold --port P --dialect legacy|modern --load stalled-sets|nonreaders
//       stalled-sets: 20 connections each declare a 64 MiB SET, send 60 MiB of it and stall;
//       nonreaders: 3 connections each send 20 GETs of a stored 60 MB value and never read.
//       Prints "ready N" once sent (N: connections whose bytes the server took; a server that stops
//       reading for 2 s is moved past), and holds the connections until stdin closes.
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "ddprun/store/errors.hpp"
#include "ddprun/store/store_client.hpp"
#include "ddprun/store/wire_protocol.hpp"

using namespace ddprun::store;
using Clock = std::chrono::steady_clock;
namespace asio = boost::asio;

namespace {

constexpr size_t kBigValue = 60 << 20;
// A small request not answered within this counts as never (printed as "inf").
constexpr std::chrono::seconds kGiveUp{10};

struct Config {
  uint16_t port = 0;
  std::string dialect = "modern";
  std::string load;
  double seconds = 3.0;
  wire::Dialect wire_dialect() const {
    return dialect == "legacy" ? wire::Dialect::kLegacy : wire::Dialect::kModern;
  }
  ClientOptions options() const {
    ClientOptions o;
    o.dialect = wire_dialect();
    o.timeout = std::chrono::seconds(120);
    return o;
  }
};

// A connection that sends frames and never reads: what a client stuck elsewhere looks like.
class Silent {
 public:
  explicit Silent(uint16_t port) : socket_(io_) {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
    // A server that stops reading (stuck elsewhere) must not stall the load generator forever.
    const timeval limit{2, 0};
    ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  }
  // True when every byte was taken; false when the server dropped the connection or stopped
  // reading for 2 s. (Plain send(): asio's blocking write would wait out SO_SNDTIMEO forever.)
  bool send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n =
          ::send(socket_.native_handle(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
};

// Frames in the config's dialect, as torch's client writes them (keys with its "/" prefix).
std::string frames(const Config& cfg, wire::Op op, const std::string& key, int count,
                   const std::string& value = {}) {
  std::string out;
  if (cfg.wire_dialect() == wire::Dialect::kModern) {
    wire::Request validate;
    validate.op = wire::Op::kValidate;
    validate.u32 = wire::kValidationMagic;
    wire::encode_request(validate, cfg.wire_dialect(), out);
  }
  for (int i = 0; i < count; ++i) {
    wire::Request r;
    r.op = op;
    r.key = "/" + key;
    r.value = value;
    wire::encode_request(r, cfg.wire_dialect(), out);
  }
  return out;
}

int latency(const Config& cfg) {
  StoreClient setter("127.0.0.1", cfg.port, cfg.options());
  setter.set("big", std::string(kBigValue, 'v'));
  std::atomic<bool> stop{false};
  std::vector<std::thread> load;
  std::unique_ptr<Silent> nonreader;
  if (cfg.load == "nonreader") {
    nonreader = std::make_unique<Silent>(cfg.port);
    nonreader->send(frames(cfg, wire::Op::kGet, "big", 50));
  } else {
    for (int i = 0; i < 8; ++i) {
      load.emplace_back([&] {
        StoreClient c("127.0.0.1", cfg.port, cfg.options());
        while (!stop) c.get("big");
      });
    }
  }
  ClientOptions o = cfg.options();
  o.timeout = kGiveUp;
  std::vector<double> ms;
  try {
    StoreClient c("127.0.0.1", cfg.port, o);
    const auto end = Clock::now() + std::chrono::duration<double>(cfg.seconds);
    while (Clock::now() < end) {
      const auto start = Clock::now();
      c.set("small", "x");
      c.get("small");
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
  } catch (const StoreError&) {
    // The server did not answer a small request (or a connect) for kGiveUp: it is stuck behind
    // the load.
    std::cout << "inf inf inf" << std::endl;
    std::_Exit(0);  // the load's threads may be stuck in it too
  }
  stop = true;
  for (auto& t : load) t.join();
  std::sort(ms.begin(), ms.end());
  std::cout << ms[ms.size() / 2] << " " << ms[ms.size() * 99 / 100] << " " << ms.back()
            << std::endl;
  return 0;
}

int hold(const Config& cfg) {
  std::vector<std::unique_ptr<Silent>> conns;
  int taken = 0;
  if (cfg.load == "stalled-sets") {
    // The frame of a 64 MiB SET cut after 60 MiB of its value.
    std::string frame = frames(cfg, wire::Op::kSet, "stalled", 1, std::string(64 << 20, 's'));
    frame.resize(frame.size() - (4 << 20));
    for (int i = 0; i < 20; ++i) {
      conns.push_back(std::make_unique<Silent>(cfg.port));
      taken += conns.back()->send(frame);
    }
  } else {
    StoreClient setter("127.0.0.1", cfg.port, cfg.options());
    setter.set("big", std::string(kBigValue, 'v'));
    const std::string gets = frames(cfg, wire::Op::kGet, "big", 20);
    for (int i = 0; i < 3; ++i) {
      conns.push_back(std::make_unique<Silent>(cfg.port));
      taken += conns.back()->send(gets);
    }
  }
  std::cout << "ready " << taken << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("heavy clients against a TCPStore server");
  Config cfg;
  app.require_subcommand(1);
  auto* lat = app.add_subcommand("latency");
  auto* hld = app.add_subcommand("hold");
  for (auto* sub : {lat, hld}) {
    sub->add_option("--port", cfg.port)->required();
    sub->add_option("--dialect", cfg.dialect)->check(CLI::IsMember({"legacy", "modern"}));
  }
  lat->add_option("--load", cfg.load)->required()->check(CLI::IsMember({"nonreader", "readers"}));
  lat->add_option("--seconds", cfg.seconds);
  hld->add_option("--load", cfg.load)
      ->required()
      ->check(CLI::IsMember({"stalled-sets", "nonreaders"}));
  CLI11_PARSE(app, argc, argv);
  return app.got_subcommand(lat) ? latency(cfg) : hold(cfg);
}
