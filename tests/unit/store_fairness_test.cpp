// One heavy client must not starve the others, nor hold unbounded memory: replies that back up stop
// the reading of that client's requests, large values go out by reference in slices, and every
// connection's buffered bytes share one budget.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "ddprun/store/errors.hpp"
#include "ddprun/store/store_client.hpp"
#include "raw_connection.hpp"
#include "server_thread.hpp"

using namespace ddprun::store;
using namespace ddprun::testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kBigValue = 60 << 20;

long rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6)) / 1024;
  }
  return -1;
}

// The modern dialect's GET of `key` (as the server holds it), raw.
std::string get_frame(const std::string& key) { return std::string(1, '\x03') + str(key); }

// Small set+get round trips until `stop`, at least `min_samples`; returns their latencies sorted.
std::vector<Clock::duration> small_round_trips(uint16_t port, const std::atomic<bool>& stop,
                                               size_t min_samples) {
  StoreClient c("127.0.0.1", port);
  std::vector<Clock::duration> out;
  while (!stop || out.size() < min_samples) {
    const auto start = Clock::now();
    c.set("small", "x");
    REQUIRE(c.get("small") == "x");
    out.push_back(Clock::now() - start);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Clock::duration p99(const std::vector<Clock::duration>& sorted) {
  return sorted[sorted.size() * 99 / 100];
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string fmt_counts(const std::vector<int>& counts) {
  std::string out;
  for (int n : counts) out += (out.empty() ? "" : " ") + std::to_string(n);
  return out;
}

}  // namespace

TEST_CASE("fairness: a client GETting a 60 MB value without reading costs others nothing",
          "[fairness]") {
  ServerThread server;
  StoreClient setter("127.0.0.1", server.port());
  setter.set("big", std::string(kBigValue, 'v'));
  const long before = rss_mib();
  RawConnection heavy(server.port());
  std::string frames = kModernHello;
  for (int i = 0; i < 50; ++i) frames += get_frame("/big");
  REQUIRE(heavy.send(frames));  // and never reads
  std::atomic<bool> stop{false};
  std::thread timer([&] {
    std::this_thread::sleep_for(1s);  // the load's duration
    stop = true;
  });
  const auto lat = small_round_trips(server.port(), stop, 200);
  timer.join();
  INFO("p99 " << ms(p99(lat)) << " ms");
  CHECK(p99(lat) < 50ms);
  // One reply is queued, by reference to the stored value: no copies of it.
  CHECK(rss_mib() - before < 30);
  // Not dropped: the setter and the heavy client stay once the small clients' closes are seen.
  CHECK(server.eventually([](StoreServer& s) { return s.connection_count() == 2; }));
}

TEST_CASE("fairness: 8 clients reading a 60 MB value keep small requests and keep-alives prompt",
          "[fairness]") {
  ServerThread server;
  StoreClient setter("127.0.0.1", server.port());
  setter.set("big", std::string(kBigValue, 'v'));
  std::atomic<bool> stop{false};
  std::vector<std::atomic<int>> big_reads(8);  // whole values each reader got
  std::vector<std::thread> readers;
  for (std::atomic<int>& reads : big_reads) {
    readers.emplace_back([&] {
      StoreClient c("127.0.0.1", server.port());
      while (!stop) {
        if (c.get("big").size() == kBigValue) ++reads;
      }
    });
  }
  // An agent's presence, pinged every 250 ms: each ping answered within 1 s, and the presence
  // kept. (Its keep-alive is 2 s: with 1 s, a suite run on a slower 2-core machine, this test
  // beside another, once lost it, where the pinger's own turn on a core came late too.)
  StoreClient agent("127.0.0.1", server.port());
  agent.set_owned("presence", "alive");
  agent.keepalive(2000ms);
  Clock::duration slowest_ping{0};   // a ping's round trip
  std::atomic<bool> checked{false};  // the presence (below): the agent pings until then
  std::thread pinger([&] {
    for (uint32_t n = 1; !checked; ++n) {
      const auto sent = Clock::now();
      agent.ping(n);
      slowest_ping = std::max(slowest_ping, Clock::now() - sent);
      std::this_thread::sleep_for(250ms);
    }
  });
  // The load: 3 s, and on until every reader has had a whole value (60 s at most), so that the
  // small requests and the pings compete with all eight readers throughout. What each had when
  // it ended is what counts.
  std::vector<int> had;
  std::thread timer([&] {
    std::this_thread::sleep_for(3s);
    const auto give_up = Clock::now() + 60s;
    const auto starved = [&] {
      return std::any_of(big_reads.begin(), big_reads.end(), [](auto& n) { return n == 0; });
    };
    while (starved() && Clock::now() < give_up) std::this_thread::sleep_for(50ms);
    for (const auto& n : big_reads) had.push_back(n);
    stop = true;
  });
  const auto lat = small_round_trips(server.port(), stop, 100);
  timer.join();
  for (auto& t : readers) t.join();  // (each ends its value under way: seconds, under load)
  StoreClient observer("127.0.0.1", server.port());
  const bool present = observer.check({"presence"});  // (a get of a key gone would wait for it)
  checked = true;
  pinger.join();
  // No reader starved (how many each got depends on the machine: a CI run on a slower 2-core
  // machine got 8 in all in 3 s, with 8 readers).
  INFO("whole values read: " << fmt_counts(had));
  CHECK(std::none_of(had.begin(), had.end(), [](int n) { return n == 0; }));
  INFO("p99 " << ms(p99(lat)) << " ms over " << lat.size() << " round trips");
  // Generous for a loaded 2-core machine (ten busy threads here); scripts/bench/heavy_client.sh
  // measures the figure against torch's server.
  CHECK(p99(lat) < 250ms);
  INFO("the slowest ping's round trip " << ms(slowest_ping) << " ms");
  CHECK(slowest_ping < 1000ms);
  REQUIRE(present);
  CHECK(observer.get("presence") == "alive");
}

TEST_CASE("fairness: stalled large SETs stay within the server's memory budget", "[fairness]") {
  ServerOptions o;
  o.max_buffered_bytes = 128 << 20;
  ServerThread server(o);
  const long before = rss_mib();
  // 20 connections each declare a 64 MiB SET, send 60 MiB of it and stall.
  const std::string body(kBigValue, 'b');
  std::vector<std::unique_ptr<RawConnection>> conns;
  int refused = 0;
  for (int i = 0; i < 20; ++i) {
    conns.push_back(std::make_unique<RawConnection>(server.port()));
    const bool sent = conns.back()->send(kModernHello + std::string(1, '\x01') +
                                         str("/k" + std::to_string(i)) + le64(64 << 20) + body);
    if (!sent) ++refused;
    CHECK(server.call([](StoreServer& s) { return s.buffered_bytes(); }) <= o.max_buffered_bytes);
  }
  const auto open = server.call([](StoreServer& s) { return s.connection_count(); });
  CHECK(open <= 3);
  CHECK(20 - open >= 17);                          // evicted, each with one log line
  CHECK(rss_mib() - before < 128 + 64 + 60 + 32);  // the budget, the client's buffer, slack
  StoreClient c("127.0.0.1", server.port());
  c.set("probe", "alive");
  CHECK(c.get("probe") == "alive");
}

TEST_CASE("fairness: clients that never read hold one reply each, not the output limit",
          "[fairness]") {
  ServerThread server;
  StoreClient setter("127.0.0.1", server.port());
  setter.set("big", std::string(kBigValue, 'v'));
  const long before = rss_mib();
  std::vector<std::unique_ptr<RawConnection>> idle;
  std::string frames = kModernHello;
  for (int i = 0; i < 20; ++i) frames += get_frame("/big");
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<RawConnection>(server.port()));
    REQUIRE(idle.back()->send(frames));
  }
  // Each has its first reply queued (less what the kernel's socket buffers took of it)...
  REQUIRE(server.eventually(
      [](StoreServer& s) { return s.buffered_bytes() >= 3 * (kBigValue - (16 << 20)); }));
  // ...and no more: three replies of the stored value, queued by reference, little memory beyond
  // the value itself.
  CHECK(server.call([](StoreServer& s) { return s.buffered_bytes(); }) <
        3 * (kBigValue + (2 << 20)));
  CHECK(rss_mib() - before < 30);
  StoreClient c("127.0.0.1", server.port());
  c.set("probe", "alive");
  CHECK(c.get("probe") == "alive");
}
