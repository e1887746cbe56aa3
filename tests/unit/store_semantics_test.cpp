// The semantics of every operation, through the real server and the real client on loopback.
#include <functional>
#include <future>
#include <thread>

#include <catch2/catch.hpp>

#include "ddprun/store/errors.hpp"
#include "ddprun/store/store_client.hpp"
#include "server_thread.hpp"

using namespace ddprun::store;
using ddprun::testing::ServerThread;
using namespace std::chrono_literals;

namespace {

ClientOptions dialect(wire::Dialect d, std::chrono::milliseconds timeout = 10s) {
  ClientOptions o;
  o.dialect = d;
  o.timeout = timeout;
  return o;
}

bool has_waiters(StoreServer& s, size_t n) { return s.store().waiter_count() == n; }

}  // namespace

TEST_CASE("store: set then get returns the value in both dialects", "[store]") {
  ServerThread server;
  for (auto d : {wire::Dialect::kLegacy, wire::Dialect::kModern}) {
    StoreClient c("127.0.0.1", server.port(), dialect(d));
    c.set("k", std::string("v\0w", 3));
    CHECK(c.get("k") == std::string("v\0w", 3));
    c.set("k", "");
    CHECK(c.get("k").empty());
  }
}

TEST_CASE("store: keys written in one dialect are read in the other", "[store]") {
  ServerThread server;
  StoreClient legacy("127.0.0.1", server.port(), dialect(wire::Dialect::kLegacy));
  StoreClient modern("127.0.0.1", server.port(), dialect(wire::Dialect::kModern));
  legacy.set("from_legacy", "1");
  modern.set("from_modern", "2");
  CHECK(modern.get("from_legacy") == "1");
  CHECK(legacy.get("from_modern") == "2");
}

TEST_CASE("store: wait is woken by every kind of write", "[store]") {
  using Writer = std::function<void(StoreClient&)>;
  const std::vector<std::pair<const char*, Writer>> writers = {
      {"set", [](StoreClient& c) { c.set("w", "x"); }},
      {"add", [](StoreClient& c) { c.add("w", 1); }},
      {"append", [](StoreClient& c) { c.append("w", "x"); }},
      {"compare_set", [](StoreClient& c) { c.compare_set("w", "", "x"); }},
      {"multi_set",
       [](StoreClient& c) {
         c.multi_set({"w", "other"}, {"x", "y"});
       }},
      {"set_owned", [](StoreClient& c) { c.set_owned("w", "x"); }},
      {"queue_push", [](StoreClient& c) { c.queue_push("w", "x"); }},
  };
  for (const auto& [name, write] : writers) {
    for (auto d : {wire::Dialect::kLegacy, wire::Dialect::kModern}) {
      INFO(name << (d == wire::Dialect::kLegacy ? " legacy waiter" : " modern waiter"));
      ServerThread server;
      auto waiter = std::async(std::launch::async, [&, d = d] {
        StoreClient c("127.0.0.1", server.port(), dialect(d));
        c.wait({"w"});
      });
      REQUIRE(server.eventually([](StoreServer& s) { return has_waiters(s, 1); }));
      StoreClient writer("127.0.0.1", server.port());
      write(writer);
      REQUIRE(waiter.wait_for(10s) == std::future_status::ready);
      waiter.get();
    }
  }
}

TEST_CASE("store: a wait on several keys returns only when all exist", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port());
  auto waiter = std::async(std::launch::async, [&] {
    StoreClient w("127.0.0.1", server.port());
    w.wait({"a", "b", "c"});
  });
  REQUIRE(server.eventually([](StoreServer& s) { return has_waiters(s, 1); }));
  c.set("a", "1");
  c.set("c", "1");
  CHECK(c.check({"a", "c"}));
  CHECK_FALSE(c.check({"a", "b"}));
  CHECK(server.call([](StoreServer& s) { return s.store().waiter_count(); }) == 1);
  c.set("b", "1");
  REQUIRE(waiter.wait_for(10s) == std::future_status::ready);
  waiter.get();
}

TEST_CASE("store: a timed-out wait is cancelled on the server and the client stays usable",
          "[store]") {
  ServerThread server;
  for (auto d : {wire::Dialect::kLegacy, wire::Dialect::kModern}) {
    StoreClient c("127.0.0.1", server.port(), dialect(d));
    const auto start = std::chrono::steady_clock::now();
    const std::string never = d == wire::Dialect::kLegacy ? "never_l" : "never_m";
    CHECK_THROWS_AS(c.wait({never}, 100ms), StoreTimeout);
    CHECK(std::chrono::steady_clock::now() - start >= 100ms);
    REQUIRE(server.eventually([](StoreServer& s) { return has_waiters(s, 0); }));
    c.set("after", "ok");
    CHECK(c.get("after") == "ok");
    // A key that appears later must not deliver a stale STOP_WAITING into the stream.
    c.set(never, "now");
    CHECK(c.add("counter", 2) == (d == wire::Dialect::kLegacy ? 2 : 4));
  }
}

TEST_CASE("store: get times out when the key never appears", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port(), dialect(wire::Dialect::kModern, 150ms));
  CHECK_THROWS_AS(c.get("missing"), StoreTimeout);
}

TEST_CASE("store: compare_set follows torch's rules", "[store]") {
  ServerThread server;
  for (auto d : {wire::Dialect::kLegacy, wire::Dialect::kModern}) {
    StoreClient c("127.0.0.1", server.port(), dialect(d));
    const std::string p = d == wire::Dialect::kLegacy ? "l_" : "m_";
    // Missing key, empty expected: created.
    CHECK(c.compare_set(p + "a", "", "first") == "first");
    CHECK(c.get(p + "a") == "first");
    // Missing key, non-empty expected: not created, the expected value comes back.
    CHECK(c.compare_set(p + "b", "guess", "x") == "guess");
    CHECK_FALSE(c.check({p + "b"}));
    // Mismatch: unchanged, current value comes back.
    CHECK(c.compare_set(p + "a", "wrong", "second") == "first");
    // Match: swapped.
    CHECK(c.compare_set(p + "a", "first", "second") == "second");
    CHECK(c.get(p + "a") == "second");
  }
}

TEST_CASE("store: add keeps a decimal counter", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port(), dialect(wire::Dialect::kLegacy));
  CHECK(c.add("n", 5) == 5);
  CHECK(c.add("n", -7) == -2);
  CHECK(c.get("n") == "-2");
  c.set("n", "40");
  CHECK(c.add("n", 2) == 42);
}

TEST_CASE("store: add on a non-number drops only that connection", "[store]") {
  ServerThread server;
  StoreClient bad("127.0.0.1", server.port());
  bad.set("text", "hello");
  CHECK_THROWS_AS(bad.add("text", 1), StoreConnectionError);
  CHECK_THROWS_AS(bad.get("text"), StoreConnectionError);
  StoreClient good("127.0.0.1", server.port());
  CHECK(good.get("text") == "hello");
}

TEST_CASE("store: num_keys, delete_key and list_keys", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port());
  c.set("a", "1");
  c.set("b", "2");
  c.add("c", 1);
  CHECK(c.num_keys() == 3);
  CHECK(c.delete_key("b"));
  CHECK_FALSE(c.delete_key("b"));
  CHECK(c.num_keys() == 2);
  auto keys = c.list_keys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"a", "c"});
}

TEST_CASE("store: get_prefix returns one prefix's keys and values in key order", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port());
  c.set("job/b", "2");
  c.set("job/a", std::string("1\0x", 3));
  c.set("jobs", "not under job/");
  c.set("other/a", "3");
  c.queue_push("job/q", "queues are not keys");
  using Entries = std::vector<std::pair<std::string, std::string>>;
  CHECK(c.get_prefix("job/") == Entries{{"job/a", std::string("1\0x", 3)}, {"job/b", "2"}});
  CHECK(c.get_prefix("nothing/").empty());
  CHECK(c.get_prefix("").size() == 4);
}

TEST_CASE("store: append creates and extends", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port());
  c.append("log", "ab");
  c.append("log", "cd");
  CHECK(c.get("log") == "abcd");
}

TEST_CASE("store: multi_set and multi_get, missing keys read as empty", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port());
  c.multi_set({"x", "y"}, {"1", "2"});
  CHECK(c.multi_get({"y", "missing", "x"}) == std::vector<std::string>{"2", "", "1"});
}

TEST_CASE("store: ping echoes its nonce", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port());
  CHECK(c.ping(0xDEADBEEF) == 0xDEADBEEF);
}

TEST_CASE("store: queues are FIFO and separate from keys", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port());
  c.queue_push("q", "1");
  c.queue_push("q", "2");
  CHECK(c.queue_len("q") == 2);
  CHECK(c.num_keys() == 0);
  CHECK(c.check({"q"}));
  CHECK(c.queue_pop("q") == std::optional<std::string>("1"));
  CHECK(c.queue_pop("q") == std::optional<std::string>("2"));
  CHECK(c.queue_pop("q") == std::nullopt);
  CHECK(c.queue_len("q") == 0);
  CHECK_FALSE(c.check({"q"}));
}

TEST_CASE("store: a queue push wakes one waiter", "[store]") {
  ServerThread server;
  std::atomic<int> woken{0};
  auto waiter = [&] {
    StoreClient c("127.0.0.1", server.port(), dialect(wire::Dialect::kModern, 10s));
    try {
      c.wait({"jobs"}, 2s);
      ++woken;
    } catch (const StoreTimeout&) {
    }
  };
  auto a = std::async(std::launch::async, waiter);
  auto b = std::async(std::launch::async, waiter);
  REQUIRE(server.eventually([](StoreServer& s) { return has_waiters(s, 2); }));
  StoreClient c("127.0.0.1", server.port());
  c.queue_push("jobs", "one");
  a.get();
  b.get();
  CHECK(woken == 1);
}

TEST_CASE("store: a barrier releases everyone once world_size arrive", "[store]") {
  ServerThread server;
  constexpr int kWorld = 3;
  std::vector<std::future<void>> members;
  for (int i = 0; i < kWorld - 1; ++i) {
    members.push_back(std::async(std::launch::async, [&] {
      StoreClient c("127.0.0.1", server.port());
      c.barrier("b", kWorld);
    }));
  }
  REQUIRE(server.eventually([](StoreServer& s) { return has_waiters(s, kWorld - 1); }));
  StoreClient last("127.0.0.1", server.port());
  last.barrier("b", kWorld);
  for (auto& m : members) {
    REQUIRE(m.wait_for(10s) == std::future_status::ready);
    m.get();
  }
  CHECK(last.get("b") == "3");
}

TEST_CASE("store: a barrier that is not reached times out and is cancelled", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port());
  CHECK_THROWS_AS(c.barrier("lonely", 2, 100ms), StoreTimeout);
  REQUIRE(server.eventually([](StoreServer& s) { return has_waiters(s, 0); }));
  CHECK(c.ping(7) == 7);
}

TEST_CASE("store: the legacy client refuses operations torch 1.13 does not have", "[store]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port(), dialect(wire::Dialect::kLegacy));
  CHECK_THROWS_AS(c.append("k", "v"), std::invalid_argument);
  c.set("still", "works");
  CHECK(c.get("still") == "works");
}

TEST_CASE("store: connecting to a port nobody listens on times out", "[store]") {
  uint16_t dead_port = 0;
  {
    ServerThread server;
    dead_port = server.port();
  }
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(StoreClient("127.0.0.1", dead_port, dialect(wire::Dialect::kModern, 200ms)),
                  StoreTimeout);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("store: a client started before the server connects once it is up", "[store]") {
  // Retry-until-up is what lets workers start before their agent's store is listening.
  ServerOptions o;
  o.host = "127.0.0.1";
  boost::asio::io_context io;
  auto reserve = std::make_unique<StoreServer>(io, o);
  const uint16_t port = reserve->port();
  reserve.reset();
  auto client = std::async(std::launch::async, [&] {
    StoreClient c("127.0.0.1", port, dialect(wire::Dialect::kModern, 10s));
    return c.get("ready");
  });
  o.port = port;
  StoreServer late(io, o);
  std::thread runner([&] { io.run(); });
  {
    StoreClient setter("127.0.0.1", port);
    setter.set("ready", "yes");
  }
  CHECK(client.get() == "yes");
  boost::asio::post(io, [&] {
    late.stop();
    io.stop();
  });
  runner.join();
}
