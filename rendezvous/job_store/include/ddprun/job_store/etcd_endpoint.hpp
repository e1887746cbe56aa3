#pragma once
// Where an etcd cluster is and how to reach it: what the command line parses (--rdzv_endpoint,
// rdzv_conf user and password_file) and the etcd job store and its client use. (TLS to it:
// store::TlsFiles.)
#include <string>

namespace ddprun::rendezvous {

struct EtcdEndpoint {
  std::string host;
  int port = 2379;
};

// A user of a cluster with authentication on (rdzv_conf user, password_file): the agent logs in
// with it and sends the token etcd gives with every call, logging in again when etcd lets the
// token expire.
struct EtcdLogin {
  std::string user;
  std::string password;
};

}  // namespace ddprun::rendezvous
