#include "test_certificates.hpp"

#include <cstdio>
#include <memory>
#include <stdexcept>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace ddprun::testing {

namespace {

using Key = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using Cert = std::unique_ptr<X509, decltype(&X509_free)>;

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("test certificates: ") + what);
}

void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  check(ext != nullptr, "extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for `key` named `cn`, signed by `issuer_key` as `issuer` (null: self-signed).
Cert make_certificate(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
                      long serial) {
  Cert cert(X509_new(), &X509_free);
  check(cert != nullptr, "X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 2 * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  if (issuer == nullptr) {
    add_extension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    add_extension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_extension(cert.get(), signer, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
    add_extension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  check(X509_sign(cert.get(), issuer_key, EVP_sha256()) > 0, "X509_sign");
  return cert;
}

template <class Write>
void write_pem(const std::string& path, Write&& write) {
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  check(f != nullptr, "cannot create a PEM file");
  check(write(f.get()) == 1, "cannot write a PEM file");
}

}  // namespace

TestCertificates make_test_certificates(const std::string& dir, const std::string& name) {
  static long serial = 1;
  Key ca_key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  Key leaf_key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  check(ca_key != nullptr && leaf_key != nullptr, "EVP_EC_gen");
  const Cert ca =
      make_certificate(ca_key.get(), name + " test CA", nullptr, ca_key.get(), serial++);
  const Cert leaf = make_certificate(leaf_key.get(), name, ca.get(), ca_key.get(), serial++);
  TestCertificates files{dir + "/" + name + "-ca.pem", dir + "/" + name + ".pem",
                         dir + "/" + name + ".key"};
  write_pem(files.ca, [&](FILE* f) { return PEM_write_X509(f, ca.get()); });
  write_pem(files.cert, [&](FILE* f) { return PEM_write_X509(f, leaf.get()); });
  write_pem(files.key, [&](FILE* f) {
    return PEM_write_PrivateKey(f, leaf_key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  });
  return files;
}

}  // namespace ddprun::testing
