#pragma once
// TLS for connections to a store or an etcd cluster: the files that configure it (rdzv_conf
// protocol=https, cacert, cert, key; ddprund --tls-*), loaded once into an OpenSSL context.
#include <memory>
#include <string>

namespace boost::asio::ssl {
class context;
}

namespace ddprun::store {

struct TlsFiles {
  bool enabled = false;
  // A client checks the server's certificate against it (empty: the system's trusted CAs). A
  // server asks every client for a certificate signed by it (empty: asks for none).
  std::string ca_file;
  // This end's certificate chain and its key: a client's, when the server asks for one; a
  // server's, always.
  std::string cert_file;
  std::string key_file;
};

using TlsContext = std::shared_ptr<boost::asio::ssl::context>;

// TLS 1.2 or later. Null when `files` is not enabled. Throw std::invalid_argument naming the file
// and the reason when one cannot be loaded (missing, not PEM, a key that does not match its
// certificate), or when a server has no certificate.
TlsContext client_tls_context(const TlsFiles& files);
TlsContext server_tls_context(const TlsFiles& files);

// A hint, for a TLS failure whose usual cause is a setting (`message` is OpenSSL's reason): a
// certificate either end refuses, or one end without TLS. Empty when there is none (a broken or
// tampered connection).
std::string tls_hint(const std::string& message);

}  // namespace ddprun::store
