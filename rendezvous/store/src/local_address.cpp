#include "ddprun/store/local_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "ddprun/store/errors.hpp"

namespace ddprun::store {

namespace {

// The numeric form of an address as inet_ntop writes it ("" for a family it has no text of).
std::string numeric(const sockaddr* addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(addr);
    return ::inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf) ? buf : "";
  }
  if (addr->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(addr);
    return ::inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf) ? buf : "";
  }
  return "";
}

// `host` as an IP address in its numeric form (nullopt: not an address); `loopback` set.
std::optional<std::string> as_address(const std::string& host, bool& loopback) {
  in_addr v4{};
  in6_addr v6{};
  char buf[INET6_ADDRSTRLEN] = {};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    loopback = (ntohl(v4.s_addr) >> 24) == 127;
    return ::inet_ntop(AF_INET, &v4, buf, sizeof buf);
  }
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    // (::ffff:127.x.y.z too, as Python's ipaddress counts it.)
    loopback = IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
    return ::inet_ntop(AF_INET6, &v6, buf, sizeof buf);
  }
  return std::nullopt;
}

struct Resolved {
  std::string canonical;  // the first entry's canonical name, as the resolver gives it
  std::vector<std::string> addresses;
};

Resolved resolve(const std::string& name) {
  addrinfo hints{};
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = AI_CANONNAME;
  addrinfo* res = nullptr;
  Resolved out;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return out;
  if (res->ai_canonname != nullptr) out.canonical = res->ai_canonname;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    out.addresses.push_back(numeric(a->ai_addr));
  }
  ::freeaddrinfo(res);
  return out;
}

}  // namespace

std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    throw StoreConnectionError(fmt::format("cannot resolve '{}'", host));
  }
  std::string out;
  const int fd = ::socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      out = numeric(reinterpret_cast<const sockaddr*>(&local));
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  if (out.empty()) throw StoreConnectionError(fmt::format("no local address routes to '{}'", host));
  return out;
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

bool names_this_machine(const std::string& host) {
  if (host == "localhost") return true;
  bool loopback = false;
  const std::optional<std::string> address = as_address(host, loopback);
  if (loopback) return true;
  const std::string me = host_name();
  if (host == me) return true;
  const Resolved theirs = resolve(host), mine = resolve(me);
  if (!mine.canonical.empty() && mine.canonical == host) return true;
  return std::any_of(mine.addresses.begin(), mine.addresses.end(), [&](const std::string& a) {
    return !a.empty() && ((address && a == *address) ||
                          std::find(theirs.addresses.begin(), theirs.addresses.end(), a) !=
                              theirs.addresses.end());
  });
}

}  // namespace ddprun::store
