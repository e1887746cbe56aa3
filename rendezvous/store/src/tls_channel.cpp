#include "tls_channel.hpp"

#include <algorithm>
#include <climits>
#include <new>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <boost/asio/ssl/context.hpp>

#include "tls_alert.hpp"

namespace ddprun::store {

TlsChannel::TlsChannel(boost::asio::ssl::context& context)
    : ssl_(SSL_new(context.native_handle())),
      in_(BIO_new(BIO_s_mem())),
      out_(BIO_new(BIO_s_mem())) {
  if (ssl_ == nullptr || in_ == nullptr || out_ == nullptr) {
    BIO_free(in_);
    BIO_free(out_);
    SSL_free(ssl_);
    throw std::bad_alloc();
  }
  // An empty memory BIO is "retry later", not the end of the stream.
  BIO_set_mem_eof_return(in_, -1);
  SSL_set_bio(ssl_, in_, out_);  // SSL_free frees both
  SSL_set_accept_state(ssl_);
  SSL_set_mode(ssl_, SSL_MODE_RELEASE_BUFFERS);
}

TlsChannel::~TlsChannel() { SSL_free(ssl_); }

void TlsChannel::put_input(std::string_view ciphertext) {
  while (!ciphertext.empty()) {
    const int chunk = static_cast<int>(std::min<size_t>(ciphertext.size(), INT_MAX));
    const int n = BIO_write(in_, ciphertext.data(), chunk);
    if (n <= 0) throw std::bad_alloc();
    ciphertext.remove_prefix(static_cast<size_t>(n));
  }
}

bool TlsChannel::has_input() const { return BIO_ctrl_pending(in_) > 0 || SSL_pending(ssl_) > 0; }

bool TlsChannel::holds_input() const {
  return BIO_ctrl_pending(in_) > 0 || SSL_has_pending(ssl_) == 1;
}

bool TlsChannel::established() const { return SSL_is_init_finished(ssl_) == 1; }

TlsChannel::Read TlsChannel::read(char* out, size_t capacity, size_t& n) {
  n = 0;
  if (failed_) return Read::kFailed;
  ERR_clear_error();
  const int r = SSL_read(ssl_, out, static_cast<int>(std::min<size_t>(capacity, INT_MAX)));
  if (r > 0) {
    n = static_cast<size_t>(r);
    return Read::kData;
  }
  switch (SSL_get_error(ssl_, r)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:  // (the output BIO never fills)
      return Read::kNeedInput;
    case SSL_ERROR_ZERO_RETURN:
      return Read::kClosed;
    default:
      break;
  }
  fail("the peer broke the TLS session");
  if (BIO_number_written(out_) == 0) {
    // Its first bytes were not TLS (a clear client): OpenSSL answers those with nothing at all.
    BIO_write(out_, tls_alert::kProtocolVersion.data(),
              static_cast<int>(tls_alert::kProtocolVersion.size()));
  }
  return Read::kFailed;
}

void TlsChannel::fail(const char* otherwise) {
  const unsigned long code = ERR_peek_error();
  const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
  if (reason != nullptr) {
    error_ = reason;
  } else {
    error_ = code != 0 ? fmt::format("OpenSSL error {:#x}", code) : otherwise;
  }
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    error_ += fmt::format(" ({})", X509_verify_cert_error_string(verify));
  }
  ERR_clear_error();
  failed_ = true;
}

bool TlsChannel::write(std::string_view plaintext) {
  if (failed_) return false;
  while (!plaintext.empty()) {
    const int chunk = static_cast<int>(std::min<size_t>(plaintext.size(), INT_MAX));
    ERR_clear_error();
    const int n = SSL_write(ssl_, plaintext.data(), chunk);
    if (n <= 0) {  // (a memory BIO takes everything: only a failed session refuses)
      fail("the TLS session cannot be written");
      return false;
    }
    plaintext.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void TlsChannel::take_output(std::string& out) {
  const size_t pending = BIO_ctrl_pending(out_);
  if (pending == 0) return;
  const size_t at = out.size();
  out.resize(at + pending);
  const int n = BIO_read(out_, out.data() + at, static_cast<int>(pending));
  out.resize(at + static_cast<size_t>(n > 0 ? n : 0));
}

size_t TlsChannel::output_size() const { return BIO_ctrl_pending(out_); }

}  // namespace ddprun::store
