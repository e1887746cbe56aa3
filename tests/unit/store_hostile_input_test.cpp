// Bad input on the real port costs only the connection that sent it; the server keeps serving.
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>

#include "ddprun/store/store_client.hpp"
#include "raw_connection.hpp"
#include "server_thread.hpp"

using namespace ddprun::store;
using namespace ddprun::testing;
using namespace std::chrono_literals;

namespace {

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

void expect_serving(uint16_t port) {
  StoreClient c("127.0.0.1", port);
  c.set("probe", "alive");
  CHECK(c.get("probe") == "alive");
}

bool connections_are(ServerThread& server, size_t n) {
  return server.eventually([n](StoreServer& s) { return s.connection_count() == n; });
}

}  // namespace

TEST_CASE("hostile: random bytes cost only their own connection", "[hostile]") {
  ServerThread server;
  std::mt19937 rng(20261121);
  for (int i = 0; i < 300; ++i) {
    RawConnection raw(server.port());
    std::string junk(1 + rng() % 4096, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    if (i % 3 == 0) junk = kModernHello + junk;  // garbage after a valid handshake too
    raw.send(junk);
    raw.close();
  }
  REQUIRE(connections_are(server, 0));
  expect_serving(server.port());
}

TEST_CASE("hostile: an absurd length closes the connection without allocating it", "[hostile]") {
  ServerThread server;
  const long before = rss_kib();
  const std::vector<std::string> frames = {
      std::string(1, '\x00') + le64(1ull << 62),               // legacy SET key length
      std::string(1, '\x00') + str("/k") + le64(1ull << 40),   // legacy SET value length
      std::string(1, '\x05') + le64(1ull << 60),               // legacy WAIT key count
      kModernHello + std::string(1, '\x0B') + le64(~0ull),     // modern MULTI_SET count
      std::string("\x00\xDE\xAD\xBE\xEF\x00\x00\x00\x00", 9),  // wrong magic: a huge key
  };
  for (const auto& f : frames) {
    RawConnection raw(server.port());
    raw.send(f);
    CHECK(raw.closed_by_server(5s));
  }
  CHECK(rss_kib() - before < 64 * 1024);
  expect_serving(server.port());
}

TEST_CASE("hostile: a truncated frame followed by a close is forgotten", "[hostile]") {
  ServerThread server;
  {
    RawConnection raw(server.port());
    raw.send(std::string(1, '\x00') + str("/key") + le64(100) + "only part");
  }
  REQUIRE(connections_are(server, 0));
  StoreClient c("127.0.0.1", server.port());
  CHECK_FALSE(c.check({"key"}));
}

TEST_CASE("hostile: a stalled sender is dropped while others are served", "[hostile]") {
  ServerOptions o;
  o.partial_request_timeout = 300ms;
  ServerThread server(o);
  RawConnection slow(server.port());
  const auto start = std::chrono::steady_clock::now();
  slow.send(std::string(1, '\x00') + le64(10) + "/par");  // 4 of the key's 10 bytes, then nothing
  {
    StoreClient c("127.0.0.1", server.port());
    for (int i = 0; i < 200; ++i) c.add("n", 1);
    CHECK(c.get("n") == "200");
  }
  CHECK(slow.closed_by_server(5s));
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
}

TEST_CASE(
    "hostile: a request trickled in byte by byte is dropped at the deadline of the whole "
    "request",
    "[hostile]") {
  ServerOptions o;
  o.partial_request_timeout = 500ms;
  ServerThread server(o);
  RawConnection slow(server.port());
  const auto start = std::chrono::steady_clock::now();
  // A SET whose key is 1000 bytes long, one byte every 50 ms: never idle for 500 ms.
  slow.send(std::string(1, '\x00') + le64(1000));
  bool dropped = false;
  for (int i = 0; i < 100 && !dropped; ++i) {
    slow.send("k");
    dropped = slow.closed_by_server(50ms);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(dropped);
  CHECK(took >= 500ms);
  CHECK(took < 2s);
  expect_serving(server.port());
}

TEST_CASE("hostile: a client that never reads its replies is dropped", "[hostile]") {
  ServerOptions o;
  o.max_pending_output_bytes = 1 << 20;
  ServerThread server(o);
  {
    StoreClient c("127.0.0.1", server.port());
    c.set("big", std::string(512 * 1024, 'b'));
    REQUIRE(c.check({"big"}));  // SET has no reply: make sure it is applied before others read
  }
  RawConnection greedy(server.port());
  std::string gets = kModernHello;
  for (int i = 0; i < 400; ++i) gets += std::string(1, '\x03') + str("/big");
  greedy.send(gets);
  // 200 MiB of replies were asked for and none are read: the server gives up on this connection.
  REQUIRE(connections_are(server, 0));
  expect_serving(server.port());
}

TEST_CASE("hostile: a legacy GET of a missing key drops that connection as torch's server does",
          "[hostile]") {
  ServerThread server;
  RawConnection raw(server.port());
  raw.send(std::string(1, '\x02') + str("/missing"));
  CHECK(raw.closed_by_server(5s));
  expect_serving(server.port());
}

TEST_CASE("hostile: an ordinary request on a watch connection closes it", "[hostile]") {
  ServerThread server;
  RawConnection raw(server.port());
  raw.send(kModernHello + std::string(1, static_cast<char>(wire::kExtWatch)) +
           std::string(1, '\0') + str("/w"));
  CHECK(raw.read(1, 5s) == std::string(1, static_cast<char>(wire::WatchEvent::kRegistered)));
  raw.send(std::string(1, '\x01') + str("/k") + str("v"));
  CHECK(raw.closed_by_server(5s));
}

TEST_CASE("hostile: connections beyond the limit are refused and the rest keep working",
          "[hostile]") {
  ServerOptions o;
  o.max_connections = 4;
  ServerThread server(o);
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(std::make_unique<StoreClient>("127.0.0.1", server.port()));
  }
  RawConnection extra(server.port());
  CHECK(extra.closed_by_server(5s));
  clients[0]->set("still", "served");
  CHECK(clients[3]->get("still") == "served");
  clients.pop_back();
  REQUIRE(connections_are(server, 3));
  expect_serving(server.port());
}

TEST_CASE("hostile: a flood of bad connections writes a bounded log that still counts them all",
          "[hostile]") {
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  {
    ServerThread server;
    const auto bad = [&] {
      RawConnection raw(server.port());
      raw.send(std::string(1, '\x00') + le64(1ull << 62));  // an absurd length: dropped
      raw.close();
    };
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 300; ++i) bad();
    REQUIRE(connections_are(server, 0));
    const auto flood = std::chrono::steady_clock::now() - start;
    std::this_thread::sleep_for(1100ms);  // the next second's warning says what was left out
    bad();
    REQUIRE(connections_are(server, 0));
    expect_serving(server.port());
    const std::string text = log.str();
    size_t lines = 0, left_out = 0;
    std::istringstream in(text);
    const std::regex count_re(R"(\((\d+) similar warnings left out\))");
    for (std::string line; std::getline(in, line);) {
      if (line.find("dropping connection") == std::string::npos) continue;
      ++lines;
      std::smatch m;
      if (std::regex_search(line, m, count_re)) left_out += std::stoul(m[1]);
    }
    CHECK(lines + left_out == 301);  // every drop is written or counted
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(flood).count() + 2;
    CHECK(lines <= static_cast<size_t>(20 * seconds));
    CHECK(left_out > 0);
  }
  spdlog::set_default_logger(previous);
}
