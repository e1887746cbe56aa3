// A claim's holder writes as the holder only while it holds the claim (JobStore::set_all_holding),
// on ddprund's backend: two agents' stores on io_contexts of their own against a store server on a
// thread of its own, so that one agent can be paused (its io_context not run) while the store and
// the other agent go on.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "ddprun/job_store/tcp_job_store.hpp"
#include "ddprun/store/async_store_client.hpp"
#include "ddprun/store/store_thread.hpp"

namespace {
using namespace ddprun::rendezvous;
using namespace ddprun::store;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using Entries = std::vector<std::pair<std::string, std::string>>;

// Runs `op` on `io` to its end (a bounded wait) and returns its result.
template <class T>
T run_on(asio::io_context& io, asio::awaitable<T> op) {
  std::optional<T> value;
  std::exception_ptr error;
  bool done = false;
  asio::co_spawn(io, std::move(op), [&](std::exception_ptr e, T v) {
    error = e;
    if (!e) value = std::move(v);
    done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done && std::chrono::steady_clock::now() < deadline) io.run_one_for(10ms);
  REQUIRE(done);
  if (error) std::rethrow_exception(error);
  return std::move(*value);
}

struct Agent {
  asio::io_context io;
  std::shared_ptr<TcpJobStore> store;

  Agent(uint16_t port, const std::string& name) {
    TcpJobStoreSpec spec;
    spec.run_id = "job";
    spec.host = "127.0.0.1";
    spec.port = port;
    spec.heartbeat_timeout = 1s;
    spec.join_timeout = 5s;
    store = std::make_shared<TcpJobStore>(io.get_executor(), spec);
    run_on(io, store->join("nodes/" + name, name, WatchSet{}));
  }
  ~Agent() {
    store->leave();
    io.run_for(100ms);
  }
  bool write(const std::string& value) {
    Entries entries;
    entries.emplace_back("place/x", value);
    return run_on(io, store->set_all_holding("leader", std::move(entries)));
  }
  std::optional<std::string> create(const std::string& key, const std::string& value) {
    return run_on(io, store->compare_set_holding("leader", key, "", value));
  }
  // Runs this agent alone for `d`: its heartbeats go on.
  void run_for(std::chrono::milliseconds d) { io.run_for(d); }
};

// The job key's value in the store, "" where it is absent.
std::string value_of(uint16_t port, const std::string& key) {
  asio::io_context io;
  auto client = run_on(io, AsyncStoreClient::connect(io.get_executor(), "127.0.0.1", port));
  const std::string full = TcpJobStore::job_key("job", key);
  std::vector<std::string> keys{full};
  std::string v = run_on(io, client->check(keys)) ? run_on(io, client->get(full)) : "";
  client->close();
  return v;
}

ServerOptions loopback() {
  ServerOptions o;
  o.host = "127.0.0.1";
  return o;
}

}  // namespace

TEST_CASE("job store: only the claim's holder writes as its holder", "[job_store]") {
  StoreThread server(loopback());
  Agent a(server.port(), "a");
  Agent b(server.port(), "b");
  REQUIRE(run_on(a.io, a.store->claim("leader", "a")) == "a");
  REQUIRE(run_on(b.io, b.store->claim("leader", "b")) == "a");
  CHECK(a.write("from a"));
  CHECK_FALSE(b.write("from b"));
  CHECK(value_of(server.port(), "place/x") == "from a");
  CHECK_FALSE(b.create("rounds/0", "b's").has_value());
  CHECK(a.create("rounds/0", "a's") == "a's");
  CHECK(a.create("rounds/0", "a's again") == "a's");  // compare_set's answer: the value there
  CHECK(value_of(server.port(), "rounds/0") == "a's");
}

TEST_CASE("job store: a holder paused past its lease writes nothing as the holder once woken",
          "[job_store]") {
  StoreThread server(loopback());
  Agent a(server.port(), "a");
  Agent b(server.port(), "b");
  REQUIRE(run_on(a.io, a.store->claim("leader", "a")) == "a");
  CHECK(a.write("from a"));
  // a is paused (its io_context does not run): the store drops its presence and its claim after
  // the heartbeat timeout, and b takes the claim.
  const auto deadline = std::chrono::steady_clock::now() + 8s;
  std::string holder;
  while (holder != "b" && std::chrono::steady_clock::now() < deadline) {
    b.run_for(100ms);
    holder = run_on(b.io, b.store->claim("leader", "b"));
  }
  REQUIRE(holder == "b");
  CHECK(b.write("from b"));
  // Woken, a has not heard that it lost the claim; its write as the holder is refused.
  CHECK_FALSE(a.write("stale, from a"));
  CHECK_FALSE(a.create("rounds/1", "stale, a's").has_value());
  CHECK(value_of(server.port(), "place/x") == "from b");
  CHECK(value_of(server.port(), "rounds/1").empty());
}
