#include "checkpoint/peer_link.hpp"

#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "checkpoint/read_ahead.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr std::string_view kPeerMagic = "DDPPEER4";
constexpr size_t kProof = 32;
constexpr uint64_t kTlsChunk = 8 << 20;    // what send_file reads and encrypts at once
constexpr uint64_t kPlainChunk = 1 << 20;  // what it reads and writes at once in the clear

std::string proof_of(const PeerAuth& auth, store::auth::Side side, std::string_view client_nonce,
                     std::string_view server_nonce) {
  return store::auth::proof(*auth.token, side, auth.scope, client_nonce, server_nonce);
}

}  // namespace

PeerLink::PeerLink(tcp::socket socket, std::chrono::milliseconds idle_limit)
    : idle_(socket.get_executor()), idle_limit_(idle_limit) {
  boost::system::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  peer_ = ec ? "a peer" : fmt::format("{}:{}", remote.address().to_string(), remote.port());
  socket.set_option(tcp::no_delay(true), ec);
  plain_ = std::make_unique<tcp::socket>(std::move(socket));
}

PeerLink::~PeerLink() {
  *alive_ = false;
  close();
}

void PeerLink::close() {
  boost::system::error_code ignored;
  idle_.cancel();
  if (tls_) tls_->lowest_layer().close(ignored);
  if (plain_) plain_->close(ignored);
}

void PeerLink::arm() {
  idle_.expires_after(idle_limit_);
  idle_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec || !*alive) return;  // re-armed, or the link is gone
    boost::system::error_code ignored;
    if (tls_) tls_->lowest_layer().close(ignored);
    if (plain_) plain_->close(ignored);
  });
}

asio::awaitable<void> PeerLink::read(char* p, size_t n) {
  arm();
  if (tls_) {
    co_await asio::async_read(*tls_, asio::buffer(p, n), asio::use_awaitable);
  } else {
    co_await asio::async_read(*plain_, asio::buffer(p, n), asio::use_awaitable);
  }
  idle_.cancel();
}

asio::awaitable<void> PeerLink::write(const char* p, size_t n) {
  arm();
  if (tls_) {
    co_await asio::async_write(*tls_, asio::buffer(p, n), asio::use_awaitable);
  } else {
    co_await asio::async_write(*plain_, asio::buffer(p, n), asio::use_awaitable);
  }
  idle_.cancel();
}

asio::awaitable<void> PeerLink::send_file(int fd, uint64_t offset, uint64_t n, CopyMac* mac) {
  // Through a buffer, in the clear as over TLS: a copy out of the page cache and write(2) moved a
  // 240 MiB copy on loopback in 0.153-0.167 s (medians of 7) where sendfile(2) took 0.209-0.270 s,
  // attaching each 4 KiB page of the file to the socket on its own (docs/performance.md). The
  // next piece is read and MAC'd on a thread of its own while this one is written.
  ReadAhead pieces(fd, offset, n, tls_ ? kTlsChunk : kPlainChunk, mac, "a checkpoint copy");
  for (std::string_view piece = pieces.next(); !piece.empty(); piece = pieces.next()) {
    co_await write(piece.data(), piece.size());
  }
}

asio::awaitable<void> PeerLink::start_tls(const store::TlsContext& tls, bool client) {
  if (!tls) co_return;
  tls_ = std::make_unique<TlsStream>(std::move(*plain_), *tls);
  plain_.reset();
  arm();
  co_await tls_->async_handshake(
      client ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
      asio::use_awaitable);
  idle_.cancel();
}

asio::awaitable<std::unique_ptr<PeerLink>> PeerLink::connect(asio::any_io_executor ex,
                                                             std::string host, int port,
                                                             const PeerAuth& auth,
                                                             std::chrono::milliseconds idle_limit) {
  const std::string where = fmt::format("{}:{}", host, port);
  try {
    if (!auth.token) {
      throw std::runtime_error("this node holds neither the job's token nor its secret yet");
    }
    tcp::resolver resolver(ex);
    const auto endpoints =
        co_await resolver.async_resolve(host, std::to_string(port), asio::use_awaitable);
    tcp::socket socket(ex);
    // A host that does not answer (gone, cut off) fails the connect at the idle limit, not at the
    // kernel's minutes of retries.
    // (The timer goes with this frame, however it ends: its wait is then cancelled, and a
    // cancelled wait does not touch the socket.)
    asio::steady_timer deadline(ex, idle_limit);
    deadline.async_wait([&socket](boost::system::error_code ec) {
      if (ec) return;
      boost::system::error_code ignored;
      socket.close(ignored);
    });
    co_await asio::async_connect(socket, endpoints, asio::use_awaitable);
    deadline.cancel();
    std::unique_ptr<PeerLink> link(new PeerLink(std::move(socket), idle_limit));
    co_await link->start_tls(auth.client_tls, true);
    // The client speaks first: a peer in the clear and one with TLS tell each other apart at once.
    const store::auth::Nonce nonce = store::auth::fresh_nonce();
    const std::string client_nonce(store::auth::view(nonce));
    std::string hello(kPeerMagic);
    hello += client_nonce;
    co_await link->write(hello.data(), hello.size());
    char greeting[kPeerMagic.size() + store::auth::kNonceBytes];
    co_await link->read(greeting, sizeof greeting);
    if (std::string_view(greeting, kPeerMagic.size()) != kPeerMagic) {
      throw std::runtime_error("it is not a ddprun agent's checkpoint port");
    }
    const std::string server_nonce(greeting + kPeerMagic.size(), store::auth::kNonceBytes);
    const std::string proof =
        proof_of(auth, store::auth::Side::kClient, client_nonce, server_nonce);
    co_await link->write(proof.data(), proof.size());
    char answer[1 + kProof];
    co_await link->read(answer, sizeof answer);
    if (answer[0] != 1) throw std::runtime_error("it refused this node's proof of the job's token");
    if (!store::auth::same_proof(
            std::string_view(answer + 1, kProof),
            proof_of(auth, store::auth::Side::kServer, client_nonce, server_nonce))) {
      throw std::runtime_error("it could not prove that it holds the job's token");
    }
    link->session_ = client_nonce + server_nonce;
    co_return link;
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error(
        fmt::format("the checkpoint port at {}: {}", where, e.code().message()));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("the checkpoint port at {}: {}", where, e.what()));
  }
}

asio::awaitable<std::unique_ptr<PeerLink>> PeerLink::accept(tcp::socket socket,
                                                            const PeerAuth& auth,
                                                            std::chrono::milliseconds idle_limit) {
  std::unique_ptr<PeerLink> link(new PeerLink(std::move(socket), idle_limit));
  try {
    co_await link->start_tls(auth.server_tls, false);
    char hello[kPeerMagic.size() + store::auth::kNonceBytes];
    co_await link->read(hello, sizeof hello);
    if (std::string_view(hello, kPeerMagic.size()) != kPeerMagic) co_return nullptr;
    const std::string client_nonce(hello + kPeerMagic.size(), store::auth::kNonceBytes);
    const store::auth::Nonce nonce = store::auth::fresh_nonce();
    const std::string server_nonce(store::auth::view(nonce));
    std::string greeting(kPeerMagic);
    greeting += server_nonce;
    co_await link->write(greeting.data(), greeting.size());
    char proof[kProof];
    co_await link->read(proof, sizeof proof);
    const bool ok = auth.token && store::auth::same_proof(std::string_view(proof, kProof),
                                                          proof_of(auth, store::auth::Side::kClient,
                                                                   client_nonce, server_nonce));
    std::string answer(1, ok ? '\1' : '\0');
    answer += ok ? proof_of(auth, store::auth::Side::kServer, client_nonce, server_nonce)
                 : std::string(kProof, '\0');
    co_await link->write(answer.data(), answer.size());
    if (!ok) co_return nullptr;
    link->session_ = client_nonce + server_nonce;
    co_return link;
  } catch (const std::exception&) {
    co_return nullptr;
  }
}

}  // namespace ddprun::agent
