#pragma once
// Address selection, IP-first: no reverse lookups, no FQDNs that other nodes cannot resolve; and
// this machine's name.
#include <string>

namespace ddprun::store {

// The local IP address the kernel would use to reach `host`:`port` (a UDP connect; nothing is
// sent). Throws StoreConnectionError when `host` does not resolve or nothing routes to it.
std::string local_address_towards(const std::string& host, int port);

// This machine's host name (gethostname), as other nodes and the logs name it.
std::string host_name();

}  // namespace ddprun::store
