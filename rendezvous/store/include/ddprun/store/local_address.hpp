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

// Whether `host` names this machine as torchrun's c10d backend decides who hosts the store:
// "localhost", a loopback address, this host name, or, of the addresses this host name resolves
// to, one whose canonical name is `host`, or which is `host` (an IP address) or one of the
// addresses `host` resolves to. As torch's, it misses addresses of other interfaces and names
// the resolver does not tie to this host name. Never throws; a name that does not resolve is not
// this machine.
bool names_this_machine(const std::string& host);

}  // namespace ddprun::store
