#include "checkpoint/copy_mac.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace ddprun::agent {

namespace {

constexpr size_t kCopyKeyBytes = 32;  // AES-256's, and SHA-256's output

[[noreturn]] void fail() {
  ERR_clear_error();  // (the thread's queue is its TLS links' too)
  throw std::runtime_error("AES-256-GCM (GMAC) failed");
}

}  // namespace

struct CopyMac::Context {
  EVP_MAC_CTX* ctx = nullptr;
  ~Context() { EVP_MAC_CTX_free(ctx); }
};

CopyMac::CopyMac(const store::Token& token, std::string_view purpose)
    : ctx_(std::make_unique<Context>()) {
  std::string scope = "checkpoint copy mac\n";
  scope.append(purpose);
  key_ = store::scope_token(token, scope).bytes();
  static EVP_MAC* const gmac = EVP_MAC_fetch(nullptr, "GMAC", nullptr);
  if (gmac == nullptr || (ctx_->ctx = EVP_MAC_CTX_new(gmac)) == nullptr) {
    ERR_clear_error();
    throw std::runtime_error("AES-256-GCM (GMAC) is not available");
  }
}

CopyMac::~CopyMac() {
  if (!key_.empty()) OPENSSL_cleanse(key_.data(), key_.size());
}
CopyMac::CopyMac(CopyMac&&) noexcept = default;
CopyMac& CopyMac::operator=(CopyMac&&) noexcept = default;

std::string CopyMac::begin_sending() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(kNonceBytes)) !=
      1) {
    ERR_clear_error();
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
  unsigned char copy_key[kCopyKeyBytes];
  size_t n = 0;
  char digest[] = "SHA256";
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, digest, nullptr, key_.data(), key_.size(),
                reinterpret_cast<const unsigned char*>(nonce.data()), nonce.size(), copy_key,
                sizeof copy_key, &n) == nullptr ||
      n != kCopyKeyBytes) {
    fail();
  }
  char cipher[] = "AES-256-GCM";
  unsigned char iv[12] = {};  // (each copy's key MACs once)
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, cipher, 0),
                               OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, iv, sizeof iv),
                               OSSL_PARAM_END};
  const bool ok = EVP_MAC_init(ctx_->ctx, copy_key, sizeof copy_key, params) == 1;
  OPENSSL_cleanse(copy_key, sizeof copy_key);
  if (!ok) fail();
  begun_ = true;
}

void CopyMac::check_begun() const {
  if (!begun_) throw std::logic_error("a copy's MAC used before it began");
}

void CopyMac::add(std::string_view bytes) {
  check_begun();
  if (EVP_MAC_update(ctx_->ctx, reinterpret_cast<const unsigned char*>(bytes.data()),
                     bytes.size()) != 1) {
    fail();
  }
}

std::string CopyMac::finish() {
  check_begun();
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
