#pragma once
// The connection between two agents that carries checkpoint copies (peer_service.hpp): TCP, TLS
// when the job's store uses TLS (the same files: a store host's certificate serves here too), and a
// proof both ways before any byte of a checkpoint crosses: of the job's token where it has one,
// else of the job's secret (Rendezvous::job_secret: as hard to get as joining the job); the
// store's HMAC challenge-response (ddprun/store/auth.hpp) in the scope "checkpoints/<run id>", so
// that neither crosses the wire and a stranger neither gets a copy nor gives one. Without either
// (a node that has not joined yet) nothing is accepted and nothing connects. A connection idle for
// longer than its limit is closed (a peer that stalls mid-transfer ends its transfer, not the
// service).
//
// The greeting: the client sends "DDPPEER4" and its nonce, the server the same with its own; the
// client sends its proof; the server answers one byte (1: accepted, 0: refused) and its own proof
// (zeros when refused). Private to the agent.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "checkpoint/copy_mac.hpp"
#include "ddprun/store/auth.hpp"
#include "ddprun/store/tls.hpp"

namespace boost::asio::ssl {
template <typename Stream>
class stream;
}

namespace ddprun::agent {

struct PeerAuth {
  std::optional<store::Token> token;  // the job's token or secret (none yet: nothing crosses)
  // Whether each copy carries its MAC under the token (copy_mac.hpp): where the job has a token of
  // its own, not its secret alone.
  bool mac = false;
  std::string scope;             // "checkpoints/<run id>"
  store::TlsContext client_tls;  // null: in the clear
  store::TlsContext server_tls;
};

class PeerLink {
 public:
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // Connects to `host`:`port` and proves the token. Throws std::runtime_error naming the peer
  // where it cannot: no token yet, unreachable, refused, or a peer that cannot prove it back.
  static boost::asio::awaitable<std::unique_ptr<PeerLink>> connect(
      boost::asio::any_io_executor ex, std::string host, int port, const PeerAuth& auth,
      std::chrono::milliseconds idle_limit);
  // Greets an accepted connection; null (the connection closed) where the client does not prove
  // the token within `idle_limit`, or speaks something else.
  static boost::asio::awaitable<std::unique_ptr<PeerLink>> accept(
      boost::asio::ip::tcp::socket socket, const PeerAuth& auth,
      std::chrono::milliseconds idle_limit);

  // Exactly `n` bytes each way; throw boost::system::system_error when the connection fails or
  // stays idle past its limit.
  boost::asio::awaitable<void> read(char* p, size_t n);
  boost::asio::awaitable<void> write(const char* p, size_t n);
  // `n` bytes of the file `fd` from `offset`, each also added to `mac` where there is one, read
  // into a buffer piece by piece, the next while this one is written (read_ahead.hpp; encrypted
  // over TLS). Throws as write() does, and std::system_error where the file cannot be read.
  boost::asio::awaitable<void> send_file(int fd, uint64_t offset, uint64_t n, CopyMac* mac);
  // The other end's address, for messages.
  const std::string& peer() const { return peer_; }
  // The greeting's two nonces (the client's, then the server's): fresh on every connection, so
  // that a MAC that covers them (peer_service.hpp) holds on this connection only.
  const std::string& session() const { return session_; }
  void close();

 private:
  PeerLink(boost::asio::ip::tcp::socket socket, std::chrono::milliseconds idle_limit);
  boost::asio::awaitable<void> start_tls(const store::TlsContext& tls, bool client);
  void arm();

  using TlsStream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;
  std::unique_ptr<boost::asio::ip::tcp::socket> plain_;
  std::unique_ptr<TlsStream> tls_;
  boost::asio::steady_timer idle_;
  // False once this is destroyed: an idle timer that had fired before the cancel still runs.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::chrono::milliseconds idle_limit_;
  std::string peer_;
  std::string session_;
};

}  // namespace ddprun::agent
