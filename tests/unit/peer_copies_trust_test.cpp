// Who may reach a node's checkpoint copies (checkpoint/peer_service.hpp), and what a copy must
// prove: a stranger without the job's token or secret, idle connections from another address, TLS
// with another job's certificates, a copy altered on its way. Real services on loopback.
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <catch2/catch.hpp>

#include "checkpoint/copy_mac.hpp"
#include "peer_service_fixture.hpp"
#include "test_certificates.hpp"

using namespace ddprun::test::peer;

TEST_CASE("peer copies: a stranger without the job's token gets nothing and changes nothing",
          "[peer_copies]") {
  Folder a, b, c;
  auto holder_ = service(auth_with("0123456789abcdef-job"), b.path);
  auto member_ = service(auth_with("0123456789abcdef-job"), a.path);
  PeerService &holder = *holder_, &member = *member_;
  make_region(a.path, 0, 0, 3, 1 << 20, 1);
  const PeerAddress to{"127.0.0.1", holder.port()};
  REQUIRE(put(member, to, "node-a", a.path, {{0, 0}}, 3).ok);
  auto stranger = service(auth_with("another-job-token-0000"), c.path);
  make_region(c.path, 0, 0, 4, 1 << 20, 9);
  TransferReport sent = put(*stranger, to, "node-a", c.path, {{0, 0}}, 4);
  CHECK_FALSE(sent.ok);
  CHECK_THAT(sent.detail, Catch::Contains("refused"));
  TransferReport get = wait(stranger->get(to, {{0, 4}}, 3, c.path / "restore"));
  CHECK_FALSE(get.ok);
  CHECK_FALSE(fs::exists(fetched(c.path / "restore", 0, 3)));  // nothing was given
  asio::io_context io;
  {  // A proof of zeros (what a job without a token once accepted): refused, nothing read.
    asio::ip::tcp::socket s(io);
    s.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(holder.port())});
    asio::write(s, asio::buffer("DDPPEER4" + std::string(32, '\0')));
    char greeting[40];
    asio::read(s, asio::buffer(greeting));
    asio::write(s, asio::buffer(std::string(32, '\0')));
    char answer[33];
    asio::read(s, asio::buffer(answer));
    CHECK(answer[0] == 0);
    CHECK(std::string(answer + 1, 32) == std::string(32, '\0'));
  }
  // Garbage on the port: closed, and the service still serves the job.
  asio::ip::tcp::socket raw(io);
  raw.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(holder.port())});
  const std::string junk(200, '\x7f');
  asio::write(raw, asio::buffer(junk));
  char sink[64];
  boost::system::error_code ec;
  while (!ec) raw.read_some(asio::buffer(sink), ec);  // until the service closes it
  CHECK(holder.copies().steps() == Steps{{"node-a", {{3}}}});
  REQUIRE(put(member, to, "node-a", a.path, {{0, 0}}, 3).ok);
  // And a member that does not know the holder's token is not given the copy either: the
  // holder's own proof is checked.
  auto impostor = service(auth_with("0123456789abcdef-other"), c.path, {}, "peers2");
  TransferReport fake =
      wait(member.get({"127.0.0.1", impostor->port()}, {{0, 4}}, 3, a.path / "restore"));
  CHECK_FALSE(fake.ok);
}

TEST_CASE(
    "peer copies: without the job's token or secret a service refuses every connection and makes "
    "none; given the job's secret it serves the job's members only",
    "[peer_copies]") {
  Folder a, b, c;
  auto holder_ = service(auth_with(nullptr), b.path);
  auto sender_ = service(auth_with(nullptr), a.path);
  PeerService &holder = *holder_, &sender = *sender_;
  make_region(a.path, 0, 0, 3, 1 << 20, 1);
  const PeerAddress to{"127.0.0.1", holder.port()};
  TransferReport early = put(sender, to, "node-a", a.path, {{0, 0}}, 3);
  CHECK_FALSE(early.ok);
  CHECK_THAT(early.detail, Catch::Contains("neither the job's token nor its secret"));
  const std::string secret = ddprun::store::auth::fresh_secret();
  REQUIRE(secret.size() == 64);
  sender.use_secret(ddprun::store::Token(secret));
  TransferReport refused = put(sender, to, "node-a", a.path, {{0, 0}}, 3);
  CHECK_FALSE(refused.ok);  // the holder has no secret yet: a zero proof, or any, is refused
  CHECK_THAT(refused.detail, Catch::Contains("refused"));
  CHECK(holder.copies().steps().empty());
  holder.use_secret(ddprun::store::Token(secret));
  REQUIRE(put(sender, to, "node-a", a.path, {{0, 0}}, 3).ok);
  CHECK(holder.copies().steps() == Steps{{"node-a", {{3}}}});
  // A stranger with a secret of its own gets nothing.
  auto stranger = service(auth_with(nullptr), c.path);
  stranger->use_secret(ddprun::store::Token(ddprun::store::auth::fresh_secret()));
  TransferReport get = wait(stranger->get(to, {{0, 4}}, 3, c.path / "restore"));
  CHECK_FALSE(get.ok);
  CHECK_FALSE(fs::exists(fetched(c.path / "restore", 0, 3)));
  REQUIRE(wait(sender.get(to, {{0, 4}}, 3, a.path / "restore")).ok);
}

TEST_CASE(
    "peer copies: 200 idle connections from a stranger's address leave the job's members served "
    "at once",
    "[peer_copies]") {
  Folder a, b;
  auto holder_ = service(auth_with("0123456789abcdef-job"), b.path);
  auto member_ = service(auth_with("0123456789abcdef-job"), a.path);
  PeerService &holder = *holder_, &member = *member_;
  make_region(a.path, 0, 0, 3, 1 << 20, 1);
  asio::io_context io;
  std::vector<asio::ip::tcp::socket> idle;
  for (int i = 0; i < 200; ++i) {  // from 127.0.0.2; the member comes from 127.0.0.1
    asio::ip::tcp::socket& s = idle.emplace_back(io);
    s.open(asio::ip::tcp::v4());
    s.bind({asio::ip::make_address("127.0.0.2"), 0});
    s.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(holder.port())});
  }
  const auto started = std::chrono::steady_clock::now();
  TransferReport sent = put(member, {"127.0.0.1", holder.port()}, "node-a", a.path, {{0, 0}}, 3);
  INFO(sent.detail);
  CHECK(sent.ok);
  // At once, not once the idle connections time out.
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
}

TEST_CASE(
    "peer copies: with TLS a copy goes encrypted, and a peer without the job's certificates gets "
    "nothing",
    "[peer_copies]") {
  Folder a, b, c, certs;
  const auto files = [](const ddprun::testing::TestCertificates& t) {
    ddprun::store::TlsFiles f;
    f.enabled = true;
    f.ca_file = t.ca;
    f.cert_file = t.cert;
    f.key_file = t.key;
    return f;
  };
  const auto with_tls = [](PeerAuth auth, const ddprun::store::TlsFiles& f) {
    auth.client_tls = ddprun::store::client_tls_context(f);
    auth.server_tls = ddprun::store::server_tls_context(f);
    return auth;
  };
  const auto job = files(ddprun::testing::make_test_certificates(certs.path.string(), "job"));
  const auto other = files(ddprun::testing::make_test_certificates(certs.path.string(), "other"));
  auto holder_ = service(with_tls(auth_with("0123456789abcdef-job"), job), b.path);
  auto sender_ = service(with_tls(auth_with("0123456789abcdef-job"), job), a.path);
  PeerService &holder = *holder_, &sender = *sender_;
  const std::string payload = make_region(a.path, 0, 0, 2, 1 << 20, 5);
  const PeerAddress to{"127.0.0.1", holder.port()};
  TransferReport sent = put(sender, to, "n", a.path, {{0, 0}}, 2);
  INFO(sent.detail);
  REQUIRE(sent.ok);
  REQUIRE(wait(sender.get(to, {{0, 4}}, 2, c.path / "restore")).ok);
  CHECK(payload_of_file(fetched(c.path / "restore", 0, 2)) == payload);
  // In the clear, or with a certificate of another CA (the token right): refused.
  auto clear = service(auth_with("0123456789abcdef-job"), c.path);
  CHECK_FALSE(put(*clear, to, "n", a.path, {{0, 0}}, 2).ok);
  auto stranger = service(with_tls(auth_with("0123456789abcdef-job"), other), c.path, {}, "peers2");
  CHECK_FALSE(wait(stranger->get(to, {{0, 4}}, 2, c.path / "stranger")).ok);
  CHECK(holder.copies().steps() == Steps{{"n", {{2}}}});
}

TEST_CASE(
    "peer copies: a copy altered on its way, its CRC made to match, fails its MAC and is not "
    "kept",
    "[peer_copies]") {
  Folder b;
  auto holder = service(auth_with("0123456789abcdef-job"), b.path);
  const std::string sent = payload_of(1 << 20, 4);
  std::string altered = sent;
  altered[12345] ^= 1;
  // What an attacker on the way can do: change bytes and give the header the new bytes' CRC.
  const std::string header = region_header_for(record_of(altered, 7), altered.size(), 0);
  // A put's request of origin "n", rank 0, step 7, in round `round`.
  const auto request_of = [&](uint64_t round) {
    const uint64_t words[] = {1, 0, 0, 7, kRegionHeader + altered.size(), round, 1};
    return std::string(reinterpret_cast<const char*>(words), sizeof words) + "n";
  };
  // A MAC as a member makes it (peer_service.hpp): its nonce, then the MAC of the connection's
  // session, the request of round `round`, the header and `payload` (none: the header's MAC).
  using MacOf = std::function<std::string(const std::string& session)>;
  const auto member = [&](uint64_t round, const std::string& payload) -> MacOf {
    return [&, round, payload](const std::string& session) {
      CopyMac mac(ddprun::store::Token("0123456789abcdef-job"), "checkpoints/job");
      std::string out = mac.begin_sending();
      mac.add(session + request_of(round));
      mac.add(header);
      mac.add(payload);
      return out + mac.finish();
    };
  };
  const MacOf zeros = [](const std::string&) {
    return std::string(CopyMac::kNonceBytes + CopyMac::kTagBytes, '\0');
  };
  // A put of `payload` in round `round` with these MACs: the header's first, then the payload's
  // nonce before the payload and its MAC after.
  const auto put_by_hand = [&](const std::string& payload, uint64_t round, const MacOf& header_mac,
                               const MacOf& payload_mac) {
    asio::io_context io;
    std::string session;
    asio::ip::tcp::socket s = member_socket(io, holder->port(), &session);
    asio::write(s, asio::buffer(request_of(round) + header));
    asio::write(s, asio::buffer(header_mac(session)));
    if (const std::string why = read_status(s); !why.empty()) return why;
    const std::string mac = payload_mac(session);
    asio::write(s, asio::buffer(mac.substr(0, CopyMac::kNonceBytes)));
    asio::write(s, asio::buffer(payload));
    asio::write(s, asio::buffer(mac.substr(CopyMac::kNonceBytes)));
    return read_status(s);
  };
  // A header whose MAC is not a member's is refused before any payload.
  CHECK_THAT(put_by_hand(altered, 0, zeros, member(0, altered)), Catch::Contains("fails its MAC"));
  CHECK(holder->copies().steps().empty());
  // So is a member's header MAC whose request was changed on the way (another round: a copy
  // replayed into a later round's timeline), and one made on another connection (a replay).
  CHECK_THAT(put_by_hand(altered, 1, member(0, ""), member(1, altered)),
             Catch::Contains("fails its MAC"));
  const MacOf recorded = [&](const std::string&) { return member(0, "")(std::string(64, 'r')); };
  CHECK_THAT(put_by_hand(altered, 0, recorded, member(0, altered)),
             Catch::Contains("fails its MAC"));
  CHECK(holder->copies().steps().empty());
  // The sender's MAC was of the bytes it sent: the altered ones are refused, nothing kept.
  CHECK_THAT(put_by_hand(altered, 0, member(0, ""), member(0, sent)),
             Catch::Contains("fails its MAC"));
  CHECK(holder->copies().steps().empty());
  // A MAC of zeros (what anyone without the token could send) likewise.
  CHECK_THAT(put_by_hand(altered, 0, member(0, ""), zeros), Catch::Contains("fails its MAC"));
  CHECK(holder->copies().steps().empty());
  // A member's MAC of these bytes under another nonce than the one sent ahead of them likewise.
  const MacOf renonced = [&](const std::string& session) {
    std::string mac = member(0, altered)(session);
    mac[0] ^= 1;
    return mac;
  };
  CHECK_THAT(put_by_hand(altered, 0, member(0, ""), renonced), Catch::Contains("fails its MAC"));
  CHECK(holder->copies().steps().empty());
  // The same bytes with their own MAC, which only a member can make, are kept.
  CHECK(put_by_hand(altered, 0, member(0, ""), member(0, altered)).empty());
  CHECK(holder->copies().steps() == Steps{{"n", {{7}}}});
}

TEST_CASE(
    "peer copies: a copy's MAC holds only for its bytes, under its nonce, the job's token and its "
    "purpose, and each send draws another nonce",
    "[peer_copies]") {
  const ddprun::store::Token job("0123456789abcdef-job");
  const std::string bytes = payload_of(1 << 16, 3);
  const auto sent = [&](const ddprun::store::Token& token, std::string_view purpose) {
    CopyMac mac(token, purpose);
    std::string nonce = mac.begin_sending();
    mac.add(bytes);
    return std::make_pair(nonce, mac.finish());
  };
  const auto holds = [&](const std::pair<std::string, std::string>& m, std::string_view got,
                         const ddprun::store::Token& token, std::string_view purpose,
                         size_t split) {
    CopyMac mac(token, purpose);
    mac.begin_checking(m.first);
    mac.add(got.substr(0, split));
    mac.add(got.substr(split));
    return mac.matches(m.second);
  };
  const auto m = sent(job, "checkpoints/job");
  CHECK(m.first.size() == CopyMac::kNonceBytes);
  CHECK(m.second.size() == CopyMac::kTagBytes);
  // However the bytes came in pieces.
  CHECK(holds(m, bytes, job, "checkpoints/job", 0));
  CHECK(holds(m, bytes, job, "checkpoints/job", 12345));
  // One bit of the bytes, the nonce, the token or the purpose other: refused.
  std::string flipped = bytes;
  flipped[777] ^= 4;
  CHECK_FALSE(holds(m, flipped, job, "checkpoints/job", 0));
  auto renonced = m;
  renonced.first[11] ^= 1;
  CHECK_FALSE(holds(renonced, bytes, job, "checkpoints/job", 0));
  CHECK_FALSE(holds(m, bytes, ddprun::store::Token("0123456789abcdef-jox"), "checkpoints/job", 0));
  CHECK_FALSE(holds(m, bytes, job, "checkpoints/other", 0));
  // The same bytes sent again: another nonce, another MAC (a nonce is never reused on purpose).
  const auto again = sent(job, "checkpoints/job");
  CHECK(again.first != m.first);
  CHECK(again.second != m.second);
  CHECK(holds(again, bytes, job, "checkpoints/job", 0));
  // A nonce of another size is refused before anything is summed; a MAC not begun is not used.
  CopyMac short_nonce(job, "checkpoints/job");
  CHECK_THROWS_WITH(short_nonce.begin_checking("12345678"),
                    Catch::Contains("nonce of another size"));
  CHECK_THROWS_AS(short_nonce.add(bytes), std::logic_error);
  // The MAC is the construction copy_mac.hpp states, computed here through OpenSSL's cipher API:
  // AES-256-GCM's tag, over the bytes as additional data, under HMAC-SHA256(the token's key for
  // the purpose, nonce), with an IV of 12 zero bytes.
  const std::string scope_key =
      ddprun::store::scope_token(job, "checkpoint copy mac\ncheckpoints/job").bytes();
  unsigned char copy_key[32];
  unsigned int key_bytes = 0;
  REQUIRE(HMAC(EVP_sha256(), scope_key.data(), static_cast<int>(scope_key.size()),
               reinterpret_cast<const unsigned char*>(m.first.data()), m.first.size(), copy_key,
               &key_bytes) != nullptr);
  REQUIRE(key_bytes == sizeof copy_key);
  const std::unique_ptr<EVP_CIPHER_CTX, void (*)(EVP_CIPHER_CTX*)> owned(EVP_CIPHER_CTX_new(),
                                                                         EVP_CIPHER_CTX_free);
  EVP_CIPHER_CTX* const gcm = owned.get();
  const unsigned char iv[12] = {};
  int n = 0;
  REQUIRE(EVP_EncryptInit_ex(gcm, EVP_aes_256_gcm(), nullptr, copy_key, iv) == 1);
  REQUIRE(EVP_EncryptUpdate(gcm, nullptr, &n, reinterpret_cast<const unsigned char*>(bytes.data()),
                            static_cast<int>(bytes.size())) == 1);
  unsigned char none[16];
  REQUIRE(EVP_EncryptFinal_ex(gcm, none, &n) == 1);
  std::string tag(CopyMac::kTagBytes, '\0');
  REQUIRE(EVP_CIPHER_CTX_ctrl(gcm, EVP_CTRL_GCM_GET_TAG, static_cast<int>(tag.size()),
                              tag.data()) == 1);
  CHECK(tag == m.second);
}

TEST_CASE(
    "peer copies: a copy fetched whose bytes were altered on their way fails its MAC and is not "
    "restored",
    "[peer_copies]") {
  Folder c;
  const ddprun::store::Token token("0123456789abcdef-job");
  auto fetcher = service(auth_with("0123456789abcdef-job"), c.path);
  const std::string kept = payload_of(1 << 20, 6);
  std::string altered = kept;
  altered[4242] ^= 8;
  SlotRecord rec = record_of(altered, 9);  // (its CRC made to match, as anyone on the way can)
  rec.world_size = 2;
  const std::string header = region_header_for(rec, altered.size(), 0);
  // A holder that proves the token and serves step 9 with a member's MAC (peer_service.hpp: of
  // the session, the request, the header and `macd`) over the bytes `sent`; the fetch's report.
  const auto fetch_from_holder = [&](const std::string& macd, const std::string& sent) {
    asio::io_context io;
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    acceptor.non_blocking(true);
    std::thread holder([&] {
      boost::system::error_code ec;  // (any failure: the fetcher's report says it)
      asio::ip::tcp::socket s(io);
      for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
           std::chrono::steady_clock::now() < until;) {
        acceptor.accept(s, ec);
        if (ec != asio::error::would_block && ec != asio::error::try_again) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (ec) return;
      s.non_blocking(false, ec);
      char hello[40];
      asio::read(s, asio::buffer(hello), ec);
      const std::string server_nonce(32, '\7');
      asio::write(s, asio::buffer("DDPPEER4" + server_nonce), ec);
      char proof[32];
      asio::read(s, asio::buffer(proof), ec);
      const std::string client_nonce(hello + 8, 32);
      asio::write(s,
                  asio::buffer('\1' + ddprun::store::auth::proof(
                                          token, ddprun::store::auth::Side::kServer,
                                          "checkpoints/job", client_nonce, server_nonce)),
                  ec);
      uint64_t words[7] = {};
      asio::read(s, asio::buffer(words, sizeof words), ec);
      std::string origin(std::min<uint64_t>(words[6], 64), '\0');
      asio::read(s, asio::buffer(origin), ec);
      const std::string request =
          std::string(reinterpret_cast<const char*>(words), sizeof words) + origin;
      const uint64_t answer[] = {0, 0, kRegionHeader + sent.size()};
      asio::write(s, asio::buffer(answer, sizeof answer), ec);
      CopyMac mac(token, "checkpoints/job");
      const std::string nonce = mac.begin_sending();
      mac.add(client_nonce + server_nonce + request);
      mac.add(header);
      mac.add(macd);
      asio::write(s, asio::buffer(header + nonce + sent + mac.finish()), ec);
      char rest[1];
      asio::read(s, asio::buffer(rest), ec);  // until the fetcher is done with it
    });
    const PeerAddress from{"127.0.0.1", acceptor.local_endpoint().port()};
    const TransferReport got = wait(fetcher->get(from, {{0, 2}}, 9, c.path / "restore"));
    holder.join();
    return got;
  };
  // The bytes changed on the way: not what the holder's MAC is of.
  const TransferReport forged = fetch_from_holder(kept, altered);
  CHECK_FALSE(forged.ok);
  CHECK_THAT(forged.detail, Catch::Contains("fails its MAC"));
  CHECK_FALSE(fs::exists(c.path / "restore" / "step_9" / "rank_0.ddpckpt"));
  // The same holder with the MAC of the bytes it sends (the hand-made protocol is right): taken.
  const TransferReport honest = fetch_from_holder(altered, altered);
  INFO(honest.detail);
  CHECK(honest.ok);
  CHECK(payload_of_file(fetched(c.path / "restore", 0, 9)) == altered);
}
