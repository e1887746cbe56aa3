#include "ddprun/store/tls.hpp"

#include <stdexcept>

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <boost/asio/ssl/context.hpp>

namespace ddprun::store {
namespace ssl = boost::asio::ssl;

namespace {

template <class Load>
void load(const char* what, const std::string& file, Load&& f) {
  boost::system::error_code ec;
  f(ec);
  if (ec) {
    throw std::invalid_argument(
        fmt::format("TLS: cannot load the {} '{}': {}", what, file, ec.message()));
  }
}

void use_certificate(ssl::context& ctx, const TlsFiles& files) {
  load("certificate", files.cert_file,
       [&](auto& ec) { ctx.use_certificate_chain_file(files.cert_file, ec); });
  load("key", files.key_file,
       [&](auto& ec) { ctx.use_private_key_file(files.key_file, ssl::context::pem, ec); });
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
    throw std::invalid_argument(fmt::format("TLS: the key '{}' does not match the certificate '{}'",
                                            files.key_file, files.cert_file));
  }
}

TlsContext new_context(ssl::context::method method) {
  auto ctx = std::make_shared<ssl::context>(method);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  // AES-128-GCM with SHA-256 first: hardware does both, and a store's records are small.
  SSL_CTX_set_ciphersuites(
      ctx->native_handle(),
      "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  return ctx;
}

}  // namespace

TlsContext client_tls_context(const TlsFiles& files) {
  if (!files.enabled) return nullptr;
  auto ctx = new_context(ssl::context::tls_client);
  ctx->set_verify_mode(ssl::verify_peer);
  if (files.ca_file.empty()) {
    load("system's trusted CAs", "", [&](auto& ec) { ctx->set_default_verify_paths(ec); });
  } else {
    load("CA certificate", files.ca_file,
         [&](auto& ec) { ctx->load_verify_file(files.ca_file, ec); });
  }
  if (!files.cert_file.empty()) use_certificate(*ctx, files);
  return ctx;
}

TlsContext server_tls_context(const TlsFiles& files) {
  if (!files.enabled) return nullptr;
  if (files.cert_file.empty() || files.key_file.empty()) {
    throw std::invalid_argument("TLS: serving TLS needs a certificate and its key");
  }
  auto ctx = new_context(ssl::context::tls_server);
  // A session's handshake happens once, at its start: the connection's reads and writes need not
  // handle one in the middle of a stream.
  SSL_CTX_set_options(ctx->native_handle(), SSL_OP_NO_RENEGOTIATION);
  // Clients connect once per connection's life and never resume a session: the tickets TLS 1.3
  // sends after every handshake would be made for nothing, and a cache of sessions kept for
  // nothing.
  SSL_CTX_set_num_tickets(ctx->native_handle(), 0);
  SSL_CTX_set_session_cache_mode(ctx->native_handle(), SSL_SESS_CACHE_OFF);
  use_certificate(*ctx, files);
  if (!files.ca_file.empty()) {
    load("CA certificate", files.ca_file,
         [&](auto& ec) { ctx->load_verify_file(files.ca_file, ec); });
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return ctx;
}

std::string tls_hint(const std::string& message) {
  const auto has = [&](const char* s) { return message.find(s) != std::string::npos; };
  if (has("certificate verify failed")) {
    return "is rdzv_conf cacert the CA that signed the server's certificate, and is the server "
           "reached by a name or address its certificate holds?";
  }
  if (has("certificate required") || has("bad certificate") || has("unknown ca") ||
      has("peer did not return a certificate")) {
    return "the server asks for a client certificate signed by its CA: rdzv_conf cert and key";
  }
  if (has("alert protocol version")) {
    return "the store does not serve TLS, or no TLS version is allowed at both ends: rdzv_conf "
           "protocol=https on every node, and a server started with a certificate";
  }
  if (has("wrong version number") || has("packet length too long") || has("http request")) {
    return "one end speaks TLS and the other does not: rdzv_conf protocol=https on every node, "
           "and a server started with a certificate";
  }
  return {};
}

}  // namespace ddprun::store
