#include "ddprun/store/auth.hpp"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "ddprun/store/errors.hpp"

namespace ddprun::store {
namespace {

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out,
           &n) == nullptr) {
    throw StoreError("HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(out), n);
}

}  // namespace

Token::Token(std::string bytes) : bytes_(std::move(bytes)) {
  if (bytes_.size() < kMinBytes) {
    throw StoreError(
        fmt::format("a token must have at least {} bytes, not {}", kMinBytes, bytes_.size()));
  }
}

Token scope_token(const Token& secret, std::string_view scope) {
  std::string message = "ddprun scope token\n";
  message.append(scope);
  std::string hex;
  for (const unsigned char c : hmac_sha256(secret.bytes(), message))
    hex += fmt::format("{:02x}", c);
  return Token(std::move(hex));
}

namespace auth {

Nonce fresh_nonce() {
  Nonce n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    throw StoreError("the system has no randomness for an authentication nonce");
  }
  return n;
}

std::string_view view(const Nonce& n) { return {n.data(), n.size()}; }

std::string proof(const Token& token, Side side, std::string_view scope,
                  std::string_view client_nonce, std::string_view server_nonce) {
  std::string message = side == Side::kClient ? "ddprun auth client\n" : "ddprun auth server\n";
  message.append(scope).append(1, '\n');
  message.append(client_nonce).append(server_nonce);
  return hmac_sha256(token.bytes(), message);
}

bool same_proof(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace auth
}  // namespace ddprun::store
