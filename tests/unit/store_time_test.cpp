// SERVER_TIME: the store tells its wall clock, before any authentication (agents measure their
// clock's offset with it when they join), and SERVER_INFO says that it does.
#include <chrono>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include "ddprun/store/async_store_client.hpp"
#include "ddprun/store/auth.hpp"
#include "ddprun/store/wall_clock.hpp"
#include "server_thread.hpp"

using namespace ddprun;
namespace asio = boost::asio;

TEST_CASE("store time: a server with a secret tells its clock, before any token and to a job's",
          "[store]") {
  store::ServerOptions o;
  o.secret = store::Token(std::string(32, 'k'));
  testing::ServerThread server(o);
  asio::io_context io;
  const uint16_t port = server.port();
  store::ClientOptions options;
  options.timeout = std::chrono::seconds(10);
  SECTION("no credential") {}
  SECTION("a token scoped to one job's keys") {
    options.credential = store::Credential{"/job/", store::scope_token(*o.secret, "/job/")};
  }
  auto asked = asio::co_spawn(
      io,
      [port, options]() -> asio::awaitable<std::pair<store::ServerInfo, int64_t>> {
        auto client = co_await store::AsyncStoreClient::connect(co_await asio::this_coro::executor,
                                                                "127.0.0.1", port, options);
        const store::ServerInfo info = co_await client->server_info();
        const int64_t theirs = co_await client->server_time();
        client->close();
        co_return std::pair{info, theirs};
      },
      asio::use_future);
  const int64_t before = store::wall_clock_micros();
  io.run();
  const int64_t after = store::wall_clock_micros();
  const auto [info, theirs] = asked.get();
  CHECK(info.needs_auth);
  CHECK(info.tells_time);
  CHECK(theirs >= before);
  CHECK(theirs <= after);
}
