// Load generator for TCPStore servers (ddprund or torch's), using ddprun's C++ client on one
// thread.
//
// Every mode takes --token-file F [--scope PREFIX]: connections authenticate first (auth.hpp).
//
//   store_load ops     --port P --dialect legacy|modern --connections N --seconds S
//       N connections each loop set/get/add of 64-byte values on their own keys; prints ops/s.
//   store_load connect --port P --dialect legacy|modern --connections N
//       N clients connect at once and each does one set and one get; prints milliseconds until the
//       last is served.
//   store_load hold    --port P --dialect legacy|modern --connections N
//       opens N idle connections, prints "ready", and holds them until stdin closes.
//   store_load fill    --port P --dialect legacy|modern --keys K
//       sets K keys of 64-byte values; prints "done".
//   store_load storm   --port P --dialect legacy|modern --connections N [--addresses A]
//                      [--seconds S]
//       an init storm: N clients connect at once (to 127.0.0.1 .. 127.0.0.A, so that more than
//       one address's ephemeral ports can be used) and each does what init_process_group does
//       through the store: ADD to a counter, SET its address key, WAIT for the barrier key (set by
//       the client whose ADD counted the last), then GET two peers' keys and the barrier key.
//       Prints "<ms from the first connect to the last client released> <released>"; exits 3
//       when not every client is released within S seconds, printing what was.
#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>

#include "ddprun/store/async_store_client.hpp"
#include "ddprun/store/auth.hpp"

namespace asio = boost::asio;
using namespace ddprun::store;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  uint16_t port = 0;
  std::string dialect = "modern";
  int connections = 1;
  int keys = 0;
  int addresses = 1;
  double seconds = 2.0;
  std::optional<Credential> credential;  // --token-file, --scope
  TlsContext tls;                        // --tls-ca
  ClientOptions options() const {
    ClientOptions o;
    o.credential = credential;
    o.tls = tls;
    o.dialect = dialect == "legacy" ? wire::Dialect::kLegacy : wire::Dialect::kModern;
    o.timeout = std::chrono::seconds(60);
    return o;
  }
};

asio::awaitable<std::unique_ptr<AsyncStoreClient>> connect(const Config& cfg) {
  co_return co_await AsyncStoreClient::connect(co_await asio::this_coro::executor, "127.0.0.1",
                                               cfg.port, cfg.options());
}

asio::awaitable<void> ops_loop(const Config& cfg, int index, Clock::time_point end,
                               std::atomic<long>& ops) {
  auto c = co_await connect(cfg);
  const std::string key = "load/" + std::to_string(index);
  const std::string counter = key + "/n";
  const std::string value(64, 'v');
  long n = 0;
  while (Clock::now() < end) {
    for (int i = 0; i < 50; ++i) {
      co_await c->set(key, value);
      co_await c->get(key);
      co_await c->add(counter, 1);
    }
    n += 150;
  }
  ops += n;
}

asio::awaitable<void> connect_once(const Config& cfg, int index, std::atomic<int>& served) {
  auto c = co_await connect(cfg);
  const std::string key = "conn/" + std::to_string(index);
  co_await c->set(key, "x");
  if (co_await c->get(key) == "x") ++served;
}

asio::awaitable<void> storm_client(const Config& cfg, int index, std::atomic<int>& released,
                                   Clock::time_point& last) {
  const std::string host = "127.0.0." + std::to_string(1 + index % cfg.addresses);
  auto c = co_await AsyncStoreClient::connect(co_await asio::this_coro::executor, host, cfg.port,
                                              cfg.options());
  const int n = cfg.connections;
  if (co_await c->add("storm/count", 1) == n) co_await c->set("storm/done", "1");
  co_await c->set("storm/addr/" + std::to_string(index), "10.0.0.1:29500/" + std::to_string(index));
  std::vector<std::string> barrier = {"storm/done"};
  co_await c->wait(barrier);
  co_await c->get("storm/addr/" + std::to_string((index + 1) % n));
  co_await c->get("storm/addr/" + std::to_string((index + n - 1) % n));
  co_await c->get("storm/done");
  ++released;
  last = Clock::now();
}

asio::awaitable<void> hold(const Config& cfg,
                           std::vector<std::unique_ptr<AsyncStoreClient>>& held) {
  held.push_back(co_await connect(cfg));
}

asio::awaitable<void> fill(const Config& cfg) {
  auto c = co_await connect(cfg);
  const std::string value(64, 'v');
  for (int i = 0; i < cfg.keys; ++i) co_await c->set("fill/" + std::to_string(i), value);
  co_await c->num_keys();  // a round trip: every SET before it has been applied
}

// Runs make(0..n-1) to completion, or until `deadline` (then returns false).
template <class Make>
bool run_all(int n, Make make, std::optional<Clock::time_point> deadline = {}) {
  asio::io_context io(1);
  std::atomic<int> failures{0};
  for (int i = 0; i < n; ++i) {
    asio::co_spawn(io, make(i), [&](std::exception_ptr e) {
      if (!e) return;
      if (failures++ == 0) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          std::cerr << "store_load: " << ex.what() << '\n';
        }
      }
    });
  }
  if (deadline) {
    io.run_until(*deadline);
    if (!io.stopped()) return false;
  } else {
    io.run();
  }
  if (failures > 0) {
    std::cerr << "store_load: " << failures << " clients failed\n";
    std::exit(1);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string token_file, scope = "/", tls_ca;
  CLI::App app{"store_load: load generator for TCPStore servers"};
  app.require_subcommand(1);
  for (auto* sub :
       {app.add_subcommand("ops"), app.add_subcommand("connect"), app.add_subcommand("hold"),
        app.add_subcommand("fill"), app.add_subcommand("storm")}) {
    sub->add_option("--port", cfg.port)->required();
    sub->add_option("--dialect", cfg.dialect)->check(CLI::IsMember({"legacy", "modern"}));
    sub->add_option("--connections", cfg.connections);
    sub->add_option("--seconds", cfg.seconds);
    sub->add_option("--keys", cfg.keys);
    sub->add_option("--addresses", cfg.addresses)->check(CLI::Range(1, 250));
    sub->add_option("--token-file", token_file, "authenticate with this token (or secret)");
    sub->add_option("--scope", scope, "the key prefix asked for with --token-file");
    sub->add_option("--tls-ca", tls_ca, "connect over TLS, checking the server against this CA");
  }
  CLI11_PARSE(app, argc, argv);
  if (!tls_ca.empty()) cfg.tls = client_tls_context({true, tls_ca, "", ""});
  const std::string mode = app.get_subcommands().front()->get_name();
  if (!token_file.empty()) cfg.credential = Credential{scope, Token::from_file(token_file)};

  if (mode == "ops") {
    std::atomic<long> ops{0};
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(cfg.seconds));
    run_all(cfg.connections, [&](int i) { return ops_loop(cfg, i, end, ops); });
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    std::cout << static_cast<long>(ops / secs) << '\n';
  } else if (mode == "connect") {
    std::atomic<int> served{0};
    const auto start = Clock::now();
    run_all(cfg.connections, [&](int i) { return connect_once(cfg, i, served); });
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (served != cfg.connections) return 1;
    std::cout << ms.count() << '\n';
  } else if (mode == "storm") {
    std::atomic<int> released{0};
    Clock::time_point last;
    const auto start = Clock::now();
    const bool done = run_all(
        cfg.connections, [&](int i) { return storm_client(cfg, i, released, last); },
        start + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(cfg.seconds)));
    const auto end = done ? last : Clock::now();
    std::cout << std::chrono::duration_cast<std::chrono::milliseconds>(end - start).count() << ' '
              << released << std::endl;
    if (!done || released != cfg.connections) std::_Exit(3);  // skip closing 32K sockets slowly
  } else if (mode == "hold") {
    std::vector<std::unique_ptr<AsyncStoreClient>> held;
    run_all(cfg.connections, [&](int) { return hold(cfg, held); });
    std::cout << "ready" << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
    }
  } else {
    run_all(1, [&](int) { return fill(cfg); });
    std::cout << "done" << std::endl;
  }
  return 0;
}
