// The store over TLS (ServerOptions::tls, ClientOptions::tls): what crosses the wire, and every way
// a connection can get TLS wrong, each costing only that connection.
#include <filesystem>
#include <future>
#include <memory>
#include <random>

#include <catch2/catch.hpp>

#include "ddprun/store/errors.hpp"
#include "ddprun/store/store_client.hpp"
#include "ddprun/store/store_watch.hpp"
#include "ddprun/store/tls.hpp"
#include "raw_connection.hpp"
#include "relay_proxy.hpp"
#include "server_thread.hpp"
#include "test_certificates.hpp"

using namespace ddprun::store;
using ddprun::testing::RawConnection;
using ddprun::testing::RelayProxy;
using ddprun::testing::ServerThread;
using ddprun::testing::TestCertificates;
using namespace std::chrono_literals;

namespace {

struct Pki {
  Pki() {
    std::filesystem::create_directories(dir);
    job = ddprun::testing::make_test_certificates(dir, "job");
    stranger = ddprun::testing::make_test_certificates(dir, "stranger");
  }
  ~Pki() { std::filesystem::remove_all(dir); }
  const std::string dir =
      std::filesystem::temp_directory_path() / ("ddprun_tls_test_" + std::to_string(::getpid()));
  TestCertificates job;       // the store's certificates
  TestCertificates stranger;  // another CA's
};

// A store serving TLS with the job's certificate; asking clients for one signed by the job's CA
// when `client_ca`.
ServerOptions tls_server(const Pki& pki, bool client_ca = false) {
  ServerOptions o;
  o.tls = server_tls_context({true, client_ca ? pki.job.ca : "", pki.job.cert, pki.job.key});
  return o;
}

ClientOptions tls_client(const std::string& ca, const TestCertificates* own = nullptr) {
  ClientOptions o;
  o.timeout = 10s;
  o.tls = client_tls_context({true, ca, own ? own->cert : "", own ? own->key : ""});
  return o;
}

std::string random_bytes(size_t n, uint64_t seed = 42) {
  std::mt19937_64 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

// A clear client still gets served: the store's loop outlived what came before.
void expect_serving(ServerThread& server, const ClientOptions& options) {
  StoreClient c("127.0.0.1", server.port(), options);
  c.set("still", "serving");
  CHECK(c.get("still") == "serving");
}

}  // namespace

TEST_CASE("tls: a job's keys, large values and watches cross the wire encrypted", "[tls]") {
  const Pki pki;
  ServerThread server(tls_server(pki));
  RelayProxy wire(server.port());
  const ClientOptions o = tls_client(pki.job.ca);
  StoreWatch watch("127.0.0.1", wire.port(), o);
  REQUIRE(watch.add(wire::WatchMode::kKey, "plain-text-key").empty());
  StoreClient c("127.0.0.1", wire.port(), o);
  c.set("plain-text-key", "plain-text-value");
  CHECK(c.get("plain-text-key") == "plain-text-value");
  const auto e = watch.next(10s);
  CHECK(e.event == wire::WatchEvent::kKeyCreated);
  CHECK(e.new_value == "plain-text-value");
  // Larger than a TLS record and than one encrypted write of the server's.
  const std::string big = random_bytes(3 << 20);
  c.set("big", big);
  CHECK(c.get("big") == big);
  CHECK(c.multi_get({"plain-text-key", "big"}) ==
        std::vector<std::string>{"plain-text-value", big});
  const std::string seen = wire.from_clients();
  CHECK(seen.size() > big.size());
  CHECK(seen.find("plain-text") == std::string::npos);
  CHECK(seen.find(big.substr(1000, 64)) == std::string::npos);
}

TEST_CASE("tls: a clear client of a TLS store is refused with a hint and costs nothing else",
          "[tls]") {
  const Pki pki;
  ServerThread server(tls_server(pki));
  ClientOptions clear;
  clear.timeout = 10s;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      StoreClient("127.0.0.1", server.port(), clear),
      Catch::Contains("answered with a TLS alert") && Catch::Contains("protocol=https"));
  CHECK(std::chrono::steady_clock::now() - start < 5s);  // told, not left to try until 10 s
  CHECK(server.eventually([](StoreServer& s) { return s.counters().connections_dropped == 1; }));
  expect_serving(server, tls_client(pki.job.ca));
}

TEST_CASE("tls: a TLS client of a clear store fails its handshake with a hint", "[tls]") {
  const Pki pki;
  ServerThread server;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      StoreClient("127.0.0.1", server.port(), tls_client(pki.job.ca)),
      Catch::Contains("alert protocol version") && Catch::Contains("does not serve TLS"));
  CHECK(std::chrono::steady_clock::now() - start < 5s);  // told, not left to try until 10 s
  ClientOptions clear;
  expect_serving(server, clear);
}

TEST_CASE("tls: a TLS client behind a proxy connects once the store behind it is up", "[tls]") {
  const Pki pki;
  RelayProxy proxy(0);  // it accepts, then closes in the middle of the TLS handshake
  auto client = std::async(std::launch::async, [&] {
    ClientOptions o = tls_client(pki.job.ca);
    o.timeout = 20s;
    return std::make_unique<StoreClient>("127.0.0.1", proxy.port(), o);
  });
  REQUIRE(proxy.wait_accepted(2));
  ServerThread server(tls_server(pki));
  proxy.relay_to(server.port());
  REQUIRE(client.wait_for(20s) == std::future_status::ready);
  const auto c = client.get();
  c->set("k", "v");
  CHECK(c->get("k") == "v");
}

TEST_CASE("tls: a store whose certificate another CA signed is refused by the client", "[tls]") {
  const Pki pki;
  ServerThread server(tls_server(pki));
  CHECK_THROWS_AS(StoreClient("127.0.0.1", server.port(), tls_client(pki.stranger.ca)),
                  StoreAuthError);
  CHECK_THROWS_WITH(StoreClient("127.0.0.1", server.port(), tls_client(pki.stranger.ca)),
                    Catch::Contains("certificate verify failed") && Catch::Contains("cacert"));
}

TEST_CASE("tls: a store that asks for client certificates serves only those its CA signed",
          "[tls]") {
  const Pki pki;
  ServerThread server(tls_server(pki, true));
  CHECK_THROWS_WITH(StoreClient("127.0.0.1", server.port(), tls_client(pki.job.ca)),
                    Catch::Contains("certificate required") && Catch::Contains("cert and key"));
  CHECK_THROWS_AS(StoreClient("127.0.0.1", server.port(), tls_client(pki.job.ca, &pki.stranger)),
                  StoreAuthError);
  CHECK(server.eventually([](StoreServer& s) { return s.counters().connections_dropped == 2; }));
  expect_serving(server, tls_client(pki.job.ca, &pki.job));
}

TEST_CASE("tls: a connection that never finishes its handshake is closed at the auth timeout",
          "[tls]") {
  const Pki pki;
  ServerOptions o = tls_server(pki);
  o.auth_timeout = 300ms;
  ServerThread server(o);
  RawConnection silent(server.port());
  RawConnection partial(server.port());
  REQUIRE(partial.send(std::string("\x16\x03\x01\x02\x00", 5)));  // a ClientHello's header only
  const auto start = std::chrono::steady_clock::now();
  CHECK(silent.closed_by_server(5s));
  CHECK(partial.closed_by_server(5s));
  CHECK(std::chrono::steady_clock::now() - start >= 250ms);
  expect_serving(server, tls_client(pki.job.ca));
}

TEST_CASE("tls: a tampered record ends its connection only", "[tls]") {
  const Pki pki;
  ServerThread server(tls_server(pki));
  const ClientOptions o = tls_client(pki.job.ca);
  // Well past the handshake: inside the value of the first SET.
  RelayProxy tamper(server.port(), 2000);
  StoreClient c("127.0.0.1", tamper.port(), o);
  const auto tampered = [&] {
    c.set("k", random_bytes(8192));  // (SET has no reply: the GET sees the connection end)
    return c.get("k");
  };
  CHECK_THROWS_AS(tampered(), StoreConnectionError);
  CHECK(server.eventually([](StoreServer& s) { return s.counters().connections_dropped == 1; }));
  expect_serving(server, o);
}

TEST_CASE("tls: a record cut short is closed at the partial-request timeout", "[tls]") {
  const Pki pki;
  ServerOptions so = tls_server(pki);
  so.partial_request_timeout = 300ms;
  ServerThread server(so);
  RelayProxy cut(server.port());
  StoreClient c("127.0.0.1", cut.port(), tls_client(pki.job.ca));
  c.set("a", "1");
  REQUIRE(c.get("a") == "1");  // the handshake and whole records went through
  cut.pass_only(10);           // then the SET's record stops within its first bytes
  c.set("b", "2");
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(c.get("b"), StoreConnectionError);  // closed, not left waiting (a timeout)
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(server.eventually([](StoreServer& s) { return s.counters().connections_dropped == 1; }));
}

TEST_CASE("tls: garbage in place of a handshake costs only its connection", "[tls]") {
  const Pki pki;
  ServerOptions o = tls_server(pki);
  o.auth_timeout = 1s;  // a record header promising more than comes waits for it until then
  ServerThread server(o);
  std::mt19937 gen(7);
  for (int i = 0; i < 50; ++i) {
    RawConnection raw(server.port());
    std::string junk = random_bytes(1 + gen() % 4096, i);
    if (i % 2 == 0) junk.replace(0, 3, "\x16\x03\x01");  // a record header, then junk
    raw.send(junk);
    CHECK(raw.closed_by_server(5s));
  }
  expect_serving(server, tls_client(pki.job.ca));
}

TEST_CASE("tls: files that cannot serve are clear errors", "[tls]") {
  const Pki pki;
  CHECK_THROWS_WITH(server_tls_context({true, "", "", ""}),
                    Catch::Contains("certificate and its key"));
  CHECK_THROWS_WITH(server_tls_context({true, "", pki.job.cert, pki.stranger.key}),
                    Catch::Contains("cannot load the key"));
  CHECK_THROWS_WITH(client_tls_context({true, pki.dir + "/none.pem", "", ""}),
                    Catch::Contains("cannot load the CA certificate"));
  CHECK(client_tls_context({false, "", "", ""}) == nullptr);
}
