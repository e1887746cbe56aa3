#include "ddprun/store/auth.hpp"

#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "ddprun/store/errors.hpp"

namespace ddprun::store {
namespace {

// HMAC-SHA256 (RFC 2104) over one cached SHA-256 implementation: OpenSSL 3's one-shot HMAC()
// looks its algorithm up on every call, four times the cost of the hashing itself.
std::string hmac_sha256(std::string_view key, std::string_view message) {
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  thread_local const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                                                 &EVP_MD_CTX_free);
  constexpr size_t kBlock = 64;
  unsigned char k[kBlock] = {};
  unsigned int n = 0;
  if (sha256 == nullptr || ctx == nullptr) throw StoreError("SHA-256 is not available");
  if (key.size() > kBlock) {
    if (EVP_Digest(key.data(), key.size(), k, &n, sha256, nullptr) != 1) {
      throw StoreError("SHA-256 failed");
    }
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  unsigned char pad[kBlock];
  const auto digest = [&](unsigned char x, std::string_view data, unsigned char* out) {
    for (size_t i = 0; i < kBlock; ++i) pad[i] = k[i] ^ x;
    if (EVP_DigestInit_ex2(ctx.get(), sha256, nullptr) != 1 ||
        EVP_DigestUpdate(ctx.get(), pad, kBlock) != 1 ||
        EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1 ||
        EVP_DigestFinal_ex(ctx.get(), out, &n) != 1) {
      throw StoreError("SHA-256 failed");
    }
  };
  unsigned char inner[EVP_MAX_MD_SIZE], outer[EVP_MAX_MD_SIZE];
  digest(0x36, message, inner);
  digest(0x5c, std::string_view(reinterpret_cast<const char*>(inner), n), outer);
  return std::string(reinterpret_cast<const char*>(outer), n);
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

std::string fresh_secret() {
  std::string hex;
  for (const char c : fresh_nonce()) hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return hex;
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
