#pragma once
// Certificates for TLS tests, made in-process with OpenSSL: a CA and a certificate it signs for
// 127.0.0.1 and localhost, good for both server and client use, as PEM files.
#include <string>

namespace ddprun::testing {

struct TestCertificates {
  std::string ca;    // the CA's certificate
  std::string cert;  // the leaf certificate, signed by the CA
  std::string key;   // the leaf's key
};

// Writes `name`-ca.pem, `name`.pem and `name`.key into `dir` (which exists). Each call makes a new
// CA: certificates of different calls do not trust each other.
TestCertificates make_test_certificates(const std::string& dir, const std::string& name);

}  // namespace ddprun::testing
