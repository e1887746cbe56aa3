#include "checkpoint/copy_mac.hpp"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace ddprun::agent {

namespace {

// The 32 bytes of a key whose 64 hex digits scope_token gives.
std::string key_of(const store::Token& token, std::string_view purpose) {
  std::string scope = "checkpoint copy mac\n";
  scope.append(purpose);
  const std::string hex = store::scope_token(token, scope).bytes();
  const auto digit = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string key;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    key.push_back(static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1])));
  }
  return key;
}

[[noreturn]] void fail() { throw std::runtime_error("AES-256-GCM (GMAC) failed"); }

}  // namespace

struct CopyMac::Context {
  EVP_MAC_CTX* ctx = nullptr;
  ~Context() { EVP_MAC_CTX_free(ctx); }
};

CopyMac::CopyMac(const store::Token& token, std::string_view purpose)
    : key_(key_of(token, purpose)), ctx_(std::make_unique<Context>()) {
  static EVP_MAC* const gmac = EVP_MAC_fetch(nullptr, "GMAC", nullptr);
  if (gmac == nullptr || (ctx_->ctx = EVP_MAC_CTX_new(gmac)) == nullptr) {
    throw std::runtime_error("AES-256-GCM (GMAC) is not available");
  }
}

CopyMac::~CopyMac() = default;
CopyMac::CopyMac(CopyMac&&) noexcept = default;
CopyMac& CopyMac::operator=(CopyMac&&) noexcept = default;

std::string CopyMac::begin_sending() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(kNonceBytes)) !=
      1) {
    throw std::runtime_error("the system has no randomness for a checkpoint copy's MAC");
  }
  begin(nonce);
  return nonce;
}

void CopyMac::begin_checking(std::string_view nonce) {
  if (nonce.size() != kNonceBytes) throw std::runtime_error("a copy's MAC nonce of another size");
  begin(nonce);
}

void CopyMac::begin(std::string_view nonce) {
  char cipher[] = "AES-256-GCM";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, cipher, 0),
      OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, const_cast<char*>(nonce.data()),
                                        nonce.size()),
      OSSL_PARAM_END};
  if (EVP_MAC_init(ctx_->ctx, reinterpret_cast<const unsigned char*>(key_.data()), key_.size(),
                   params) != 1) {
    fail();
  }
}

void CopyMac::add(std::string_view bytes) {
  if (EVP_MAC_update(ctx_->ctx, reinterpret_cast<const unsigned char*>(bytes.data()),
                     bytes.size()) != 1) {
    fail();
  }
}

std::string CopyMac::finish() {
  std::string out(kTagBytes, '\0');
  size_t n = 0;
  if (EVP_MAC_final(ctx_->ctx, reinterpret_cast<unsigned char*>(out.data()), &n, out.size()) != 1 ||
      n != kTagBytes) {
    fail();
  }
  return out;
}

bool CopyMac::matches(std::string_view tag) { return store::auth::same_proof(finish(), tag); }

}  // namespace ddprun::agent
