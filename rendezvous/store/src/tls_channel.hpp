#pragma once
// The server's end of one connection's TLS, over memory buffers: the connection reads and writes
// its socket as it does without TLS, and this turns the ciphertext into requests and the replies
// into ciphertext. (Not an ssl::stream: the connection reads into the server's shared buffer only
// when its socket is readable, so that an idle connection holds no read buffer. OpenSSL's own
// buffers are released while idle too.)
#include <cstddef>
#include <string>
#include <string_view>

#include <openssl/types.h>

namespace boost::asio::ssl {
class context;
}

namespace ddprun::store {

class TlsChannel {
 public:
  explicit TlsChannel(boost::asio::ssl::context& context);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  // Ciphertext the peer sent.
  void put_input(std::string_view ciphertext);
  // Input that can be decrypted without more from the socket: the socket being quiet does not mean
  // there is nothing to read.
  bool has_input() const;
  // Any input held, a part of a record included.
  bool holds_input() const;

  enum class Read { kData, kNeedInput, kClosed, kFailed };
  // Decrypts up to `capacity` bytes into `out` (their count into `n` with kData), advancing the
  // handshake first; kClosed when the peer ended the session, kFailed with error() set when the
  // handshake or a record failed (an alert for the peer may then wait in the output; always one
  // when the failure came before any output, such as a clear client's first bytes), and from then
  // on.
  Read read(char* out, size_t capacity, size_t& n);
  bool established() const;
  // Encrypts `plaintext`; only once established(). False, with error() set, when the session can
  // no longer carry it (it failed).
  bool write(std::string_view plaintext);

  // Ciphertext to send (handshake messages, records, alerts), appended to `out`.
  void take_output(std::string& out);
  size_t output_size() const;
  const std::string& error() const { return error_; }

 private:
  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;   // the peer's ciphertext, read by OpenSSL
  BIO* out_ = nullptr;  // ciphertext OpenSSL wrote for the peer
  // Sets error() from OpenSSL's error queue (`otherwise` when it is empty) and marks the session
  // failed.
  void fail(const char* otherwise);

  std::string error_;
  bool failed_ = false;
};

}  // namespace ddprun::store
