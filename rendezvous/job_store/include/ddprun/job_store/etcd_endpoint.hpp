#pragma once
// Where an etcd cluster is and how to reach it: what the command line parses (--rdzv_endpoint,
// rdzv_conf's TLS files) and the etcd job store and its client use.
#include <string>

namespace ddprun::rendezvous {

struct EtcdEndpoint {
  std::string host;
  int port = 2379;
};

// TLS to the cluster (rdzv_conf protocol=https). The server's certificate is checked against
// ca_file (empty: the system's trusted CAs) and the endpoint's host name or IP address; cert_file
// and key_file, when given, are this node's client certificate (etcd's --client-cert-auth).
struct EtcdTls {
  bool enabled = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

// A user of a cluster with authentication on (rdzv_conf user, password_file): the agent logs in
// with it and sends the token etcd gives with every call, logging in again when etcd lets the
// token expire.
struct EtcdLogin {
  std::string user;
  std::string password;
};

// Throws std::invalid_argument naming the file and the reason when `tls` cannot be loaded (a
// missing file, not PEM, a key that does not match the certificate).
void check_etcd_tls(const EtcdTls& tls);

}  // namespace ddprun::rendezvous
