// ddprun's extensions: keys bound to a connection's lifetime, keep-alive, and watches; and the
// turns of the requests that share one connection (AsyncMutex).
#include <algorithm>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "ddprun/store/async_mutex.hpp"
#include "ddprun/store/errors.hpp"
#include "ddprun/store/store_client.hpp"
#include "ddprun/store/store_watch.hpp"
#include "server_thread.hpp"

using namespace ddprun::store;
using ddprun::testing::ServerThread;
using namespace std::chrono_literals;
using wire::WatchEvent;
using wire::WatchMode;

TEST_CASE("session: an owned key vanishes when its connection closes", "[session]") {
  ServerThread server;
  StoreClient observer("127.0.0.1", server.port());
  StoreWatch watch("127.0.0.1", server.port());
  {
    StoreClient owner("127.0.0.1", server.port());
    owner.set_owned("members/a", "alive");
    owner.set("permanent", "1");
    CHECK(observer.get("members/a") == "alive");
    CHECK(watch.add(WatchMode::kKey, "members/a").size() == 1);
  }
  const auto e = watch.next(5s);
  CHECK(e.event == WatchEvent::kKeyDeleted);
  CHECK(e.key == "members/a");
  CHECK(e.old_value == "alive");
  CHECK_FALSE(observer.check({"members/a"}));
  CHECK(observer.get("permanent") == "1");
}

TEST_CASE("session: a claim by compare-and-set is won once and ends with its connection",
          "[session]") {
  ServerThread server;
  StoreWatch watch("127.0.0.1", server.port());
  REQUIRE(watch.add(WatchMode::kKey, "leader").empty());
  StoreClient other("127.0.0.1", server.port());
  {
    StoreClient first("127.0.0.1", server.port());
    CHECK(first.compare_set_owned("leader", "", "a") == "a");
    CHECK(other.compare_set_owned("leader", "", "b") == "a");   // taken: the holder's value
    CHECK(first.compare_set_owned("leader", "a", "a") == "a");  // renewing keeps it
    CHECK(watch.next(5s).event == WatchEvent::kKeyCreated);
    CHECK(watch.next(5s).event == WatchEvent::kKeyUpdated);
  }
  const auto gone = watch.next(5s);
  CHECK(gone.event == WatchEvent::kKeyDeleted);
  CHECK(gone.old_value == "a");
  CHECK(other.compare_set_owned("leader", "", "b") == "b");
  // A plain compare-and-set that wins makes the key permanent, as a plain SET does.
  CHECK(other.compare_set("leader", "b", "c") == "c");
}

TEST_CASE("session: a connection that misses its keep-alive loses its keys", "[session]") {
  ServerThread server;
  StoreWatch watch("127.0.0.1", server.port());
  StoreClient owner("127.0.0.1", server.port());
  owner.set_owned("members/b", "alive");
  REQUIRE(owner.ping(1) == 1);
  REQUIRE(watch.add(WatchMode::kPrefix, "members/").size() == 1);
  const auto start = std::chrono::steady_clock::now();
  owner.keepalive(200ms);
  // The owner now stays silent, as a partitioned agent would.
  const auto e = watch.next(5s);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(e.event == WatchEvent::kKeyDeleted);
  CHECK(e.key == "members/b");
  CHECK(elapsed >= 200ms);
  CHECK(elapsed < 2s);
  CHECK_THROWS_AS(owner.ping(1), StoreConnectionError);
}

TEST_CASE("session: pings keep a keep-alive connection and its keys", "[session]") {
  ServerThread server;
  StoreClient owner("127.0.0.1", server.port());
  owner.set_owned("members/c", "alive");
  owner.keepalive(300ms);
  const auto until = std::chrono::steady_clock::now() + 1s;
  uint32_t n = 0;
  while (std::chrono::steady_clock::now() < until) {
    ++n;
    REQUIRE(owner.ping(n) == n);
    std::this_thread::sleep_for(50ms);  // the heartbeat period under test, not synchronisation
  }
  StoreClient observer("127.0.0.1", server.port());
  CHECK(observer.check({"members/c"}));
}

TEST_CASE("session: a plain write makes an owned key permanent", "[session]") {
  ServerThread server;
  StoreClient observer("127.0.0.1", server.port());
  {
    StoreClient owner("127.0.0.1", server.port());
    owner.set_owned("k", "owned");
    REQUIRE(owner.ping(1) == 1);  // a round trip orders this connection's writes before others'
    observer.set("k", "taken over");
    REQUIRE(observer.ping(1) == 1);
  }
  REQUIRE(server.eventually([](StoreServer& s) { return s.connection_count() == 1; }));
  CHECK(observer.get("k") == "taken over");
}

TEST_CASE("session: SET_OWNED from another connection moves the ownership", "[session]") {
  ServerThread server;
  StoreClient observer("127.0.0.1", server.port());
  auto second = std::make_unique<StoreClient>("127.0.0.1", server.port());
  {
    StoreClient first("127.0.0.1", server.port());
    first.set_owned("leader", "first");
    REQUIRE(first.ping(1) == 1);
    second->set_owned("leader", "second");
    REQUIRE(second->ping(1) == 1);
  }
  REQUIRE(server.eventually([](StoreServer& s) { return s.connection_count() == 2; }));
  CHECK(observer.get("leader") == "second");
  second.reset();
  REQUIRE(server.eventually([](StoreServer& s) { return s.store().owned_key_count() == 0; }));
  CHECK_FALSE(observer.check({"leader"}));
}

TEST_CASE("session: a key watch reports create, update and delete with values", "[session]") {
  ServerThread server;
  StoreWatch watch("127.0.0.1", server.port());
  CHECK(watch.add(WatchMode::kKey, "w").empty());
  StoreClient c("127.0.0.1", server.port());
  c.set("w", "1");
  c.add("w", 1);
  c.set("unrelated", "x");
  c.delete_key("w");
  auto e = watch.next(5s);
  CHECK((e.event == WatchEvent::kKeyCreated && e.new_value == "1"));
  e = watch.next(5s);
  CHECK((e.event == WatchEvent::kKeyUpdated && e.old_value == "1" && e.new_value == "2"));
  e = watch.next(5s);
  CHECK((e.event == WatchEvent::kKeyDeleted && e.old_value == "2" && e.key == "w"));
  CHECK_THROWS_AS(watch.next(100ms), StoreTimeout);
}

TEST_CASE("session: a prefix watch starts with a snapshot and misses nothing after it",
          "[session]") {
  ServerThread server;
  StoreClient c("127.0.0.1", server.port());
  c.set("job/b", "2");
  c.set("job/a", "1");
  c.set("other", "0");
  REQUIRE(c.ping(1) == 1);
  StoreWatch watch("127.0.0.1", server.port());
  const auto snapshot = watch.add(WatchMode::kPrefix, "job/");
  REQUIRE(snapshot.size() == 2);
  CHECK((snapshot[0].key == "job/a" && snapshot[0].new_value == "1"));
  CHECK((snapshot[1].key == "job/b" && snapshot[1].new_value == "2"));
  CHECK(snapshot[0].event == WatchEvent::kExisting);
  c.set("job/c", "3");
  c.set("other", "1");
  const auto e = watch.next(5s);
  CHECK((e.event == WatchEvent::kKeyCreated && e.key == "job/c"));
  CHECK_THROWS_AS(watch.next(100ms), StoreTimeout);
}

TEST_CASE("session: one watch connection carries several watches", "[session]") {
  ServerThread server;
  StoreWatch watch("127.0.0.1", server.port());
  watch.add(WatchMode::kKey, "a");
  watch.add(WatchMode::kKey, "b");
  StoreClient c("127.0.0.1", server.port());
  c.set("b", "1");
  c.set("a", "2");
  CHECK(watch.next(5s).key == "b");
  CHECK(watch.next(5s).key == "a");
}

TEST_CASE(
    "session: a request cancelled while it waits for the connection never holds it, and "
    "the next request still gets it",
    "[session]") {
  namespace asio = boost::asio;
  asio::io_context io;
  AsyncMutex requests(io.get_executor());
  std::vector<std::string> held;  // who held the connection, in order
  int holding = 0, most_at_once = 0;
  asio::steady_timer release(io, 1h);  // the first request holds it until cancelled
  const auto request = [&](std::string name, asio::steady_timer* until) -> asio::awaitable<void> {
    const AsyncMutex::Guard turn = co_await requests.lock();
    held.push_back(name);
    most_at_once = std::max(most_at_once, ++holding);
    if (until != nullptr) co_await until->async_wait(asio::as_tuple(asio::use_awaitable));
    --holding;
  };
  std::exception_ptr b_error;
  bool c_done = false;
  asio::cancellation_signal cancel_b;
  asio::co_spawn(io, request("a", &release), asio::detached);
  asio::co_spawn(
      io, request("b", nullptr),
      asio::bind_cancellation_slot(cancel_b.slot(), [&](std::exception_ptr e) { b_error = e; }));
  asio::co_spawn(io, request("c", nullptr), [&](std::exception_ptr) { c_done = true; });
  io.poll();
  REQUIRE(held == std::vector<std::string>{"a"});
  cancel_b.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(held == std::vector<std::string>{"a"});  // b left the line without holding it
  REQUIRE(b_error);
  CHECK_THROWS_AS(std::rethrow_exception(b_error), boost::system::system_error);
  release.cancel();
  io.poll();
  CHECK(held == std::vector<std::string>{"a", "c"});
  CHECK(c_done);
  CHECK(most_at_once == 1);
}
