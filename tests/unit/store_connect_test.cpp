// Connecting to a store that is not ready to answer yet: behind a proxy whose backend is not up
// (the proxy accepts, then closes), or at its connection limit. The client makes such connections
// again until its timeout, and says what happened when the timeout passes.
#include <chrono>
#include <future>
#include <memory>

#include <catch2/catch.hpp>

#include "ddprun/store/errors.hpp"
#include "ddprun/store/store_client.hpp"
#include "ddprun/store/store_watch.hpp"
#include "relay_proxy.hpp"
#include "server_thread.hpp"

using namespace ddprun::store;
using ddprun::testing::RelayProxy;
using ddprun::testing::ServerThread;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

ClientOptions within(std::chrono::milliseconds timeout) {
  ClientOptions o;
  o.timeout = timeout;
  return o;
}

}  // namespace

TEST_CASE("connect: a client behind a proxy connects once the store behind it is up", "[connect]") {
  RelayProxy proxy(0);  // nothing behind it yet
  auto client = std::async(std::launch::async, [&] {
    return std::make_unique<StoreClient>("127.0.0.1", proxy.port(), within(20s));
  });
  REQUIRE(proxy.wait_accepted(2));  // it was ended, and came back
  ServerThread server;
  proxy.relay_to(server.port());
  REQUIRE(client.wait_for(20s) == std::future_status::ready);
  const auto c = client.get();
  c->set("through", "the proxy");
  CHECK(c->get("through") == "the proxy");
}

TEST_CASE("connect: a watch behind a proxy connects once the store behind it is up", "[connect]") {
  RelayProxy proxy(0);
  auto watch = std::async(std::launch::async, [&] {
    return std::make_unique<StoreWatch>("127.0.0.1", proxy.port(), within(20s));
  });
  REQUIRE(proxy.wait_accepted(2));
  ServerThread server;
  proxy.relay_to(server.port());
  REQUIRE(watch.wait_for(20s) == std::future_status::ready);
  const auto w = watch.get();
  CHECK(w->add(wire::WatchMode::kKey, "k").empty());
  StoreClient c("127.0.0.1", server.port());
  c.set("k", "v");
  const auto e = w->next(10s);
  CHECK(e.event == wire::WatchEvent::kKeyCreated);
  CHECK(e.new_value == "v");
}

TEST_CASE(
    "connect: a store that ends every connection fails the connect at its timeout and says so",
    "[connect]") {
  RelayProxy proxy(0);
  const auto start = Clock::now();
  CHECK_THROWS_WITH(StoreClient("127.0.0.1", proxy.port(), within(1500ms)),
                    Catch::Contains("ended by the store before it answered") &&
                        Catch::Contains("connection limit"));
  const auto took = Clock::now() - start;
  CHECK(took >= 1s);  // kept trying, backing off ...
  CHECK(took < 5s);   // ... until its timeout
  CHECK(proxy.accepted() >= 3);
  CHECK(proxy.accepted() < 100);
}

TEST_CASE("connect: a client waits out a store at its connection limit", "[connect]") {
  ServerOptions o;
  o.max_connections = 1;
  ServerThread server(o);
  auto holder = std::make_unique<StoreClient>("127.0.0.1", server.port());
  auto client = std::async(std::launch::async, [&] {
    return std::make_unique<StoreClient>("127.0.0.1", server.port(), within(20s));
  });
  REQUIRE(server.eventually([](StoreServer& s) { return s.counters().connections_refused >= 2; }));
  holder.reset();
  REQUIRE(client.wait_for(20s) == std::future_status::ready);
  const auto c = client.get();
  c->set("after", "the limit");
  CHECK(c->get("after") == "the limit");
}
