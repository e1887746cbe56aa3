#include "checkpoint/slot_mac.hpp"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <stdexcept>

namespace ddprun::agent {

struct SlotMac::Context {
  EVP_MAC_CTX* ctx = nullptr;
  ~Context() { EVP_MAC_CTX_free(ctx); }
};

SlotMac::SlotMac(const store::Token& token, std::string_view purpose)
    : ctx_(std::make_unique<Context>()) {
  static EVP_MAC* const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  std::string scope = "checkpoint mac\n";
  scope.append(purpose);
  const store::Token key = store::scope_token(token, scope);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_END};
  if (hmac == nullptr || (ctx_->ctx = EVP_MAC_CTX_new(hmac)) == nullptr ||
      EVP_MAC_init(ctx_->ctx, reinterpret_cast<const unsigned char*>(key.bytes().data()),
                   key.bytes().size(), params) != 1) {
    throw std::runtime_error("HMAC-SHA256 is not available");
  }
}

SlotMac::~SlotMac() = default;
SlotMac::SlotMac(SlotMac&&) noexcept = default;
SlotMac& SlotMac::operator=(SlotMac&&) noexcept = default;

void SlotMac::add(std::string_view bytes) {
  if (EVP_MAC_update(ctx_->ctx, reinterpret_cast<const unsigned char*>(bytes.data()),
                     bytes.size()) != 1) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
}

std::string SlotMac::finish() {
  std::string out(kBytes, '\0');
  size_t n = 0;
  if (EVP_MAC_final(ctx_->ctx, reinterpret_cast<unsigned char*>(out.data()), &n, out.size()) != 1 ||
      n != kBytes) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return out;
}

bool SlotMac::matches(std::string_view mac) { return store::auth::same_proof(finish(), mac); }

}  // namespace ddprun::agent
