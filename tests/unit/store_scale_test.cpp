// Many clients at once against one server.
#include <atomic>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "ddprun/store/async_store_client.hpp"
#include "server_thread.hpp"

using namespace ddprun::store;
using ddprun::testing::ServerThread;
namespace asio = boost::asio;

namespace {

constexpr int kClients = 1000;

// Each client writes its key, reports in, waits until all have, then reads a neighbour's key. "go"
// is set only after every client has arrived, so all kClients connections are open at the same
// time.
asio::awaitable<void> member(uint16_t port, int i, std::atomic<int>& verified) {
  ClientOptions o;
  o.timeout = std::chrono::seconds(60);
  auto c =
      co_await AsyncStoreClient::connect(co_await asio::this_coro::executor, "127.0.0.1", port, o);
  co_await c->set("member/" + std::to_string(i), std::to_string(i));
  if (co_await c->add("arrived", 1) == kClients) co_await c->set("go", "1");
  const std::vector<std::string> go(1, "go");
  co_await c->wait(go);
  const int next = (i + 1) % kClients;
  if (co_await c->get("member/" + std::to_string(next)) == std::to_string(next)) ++verified;
}

}  // namespace

TEST_CASE("scale: 1,000 concurrent connections are all served", "[scale]") {
  ServerThread server;
  asio::io_context io;
  std::atomic<int> verified{0};
  std::atomic<int> failed{0};
  std::string first_error;
  for (int i = 0; i < kClients; ++i) {
    asio::co_spawn(io, member(server.port(), i, verified), [&](std::exception_ptr e) {
      if (!e) return;
      if (failed++ == 0) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          first_error = ex.what();
        }
      }
    });
  }
  io.run();
  INFO(first_error);
  CHECK(failed == 0);
  CHECK(verified == kClients);
  CHECK(server.call([](StoreServer& s) { return s.store().size(); }) == kClients + 2);
}
