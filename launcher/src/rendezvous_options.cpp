#include "rendezvous_options.hpp"

#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "ddprun/agent/split.hpp"
#include "ddprun/store/errors.hpp"
#include "ddprun/store/local_address.hpp"
#include "launch_config.hpp"
#include "option_values.hpp"
#include "python_number.hpp"

namespace ddprun::launcher {
namespace {

using std::chrono::milliseconds;

// --rdzv_conf, read into what it sets. Only the keys torchrun reads (and ddprun's
// reconnect_timeout) are taken; others are refused so that typos do not pass silently.
struct RdzvConf {
  std::optional<milliseconds> join_timeout, last_call_timeout, heartbeat_timeout, reconnect_timeout;
  std::optional<milliseconds> timeout;  // the static and etcd backends' wait for the nodes
  std::optional<bool> is_host;
  std::optional<std::string> etcd_prefix;
  std::optional<std::string> protocol;
  std::optional<std::string> auth_token_file;
  std::optional<std::string> user, password_file;  // etcd's authentication
  std::map<std::string, std::string> tls_files;    // by the name given (cacert, ca_cert, ...)
};

enum class ConfKind { kPositiveSeconds, kSeconds, kCount, kBool, kText, kTlsFile };
const std::map<std::string, ConfKind> kRdzvConfKeys = {
    {"join_timeout", ConfKind::kPositiveSeconds},
    {"last_call_timeout", ConfKind::kPositiveSeconds},
    {"heartbeat_timeout", ConfKind::kPositiveSeconds},
    {"timeout", ConfKind::kPositiveSeconds},
    // ddprun's: how long agents ride out a lost standalone c10d store (ddprund restarting).
    {"reconnect_timeout", ConfKind::kPositiveSeconds},
    {"close_timeout", ConfKind::kSeconds},
    {"read_timeout", ConfKind::kSeconds},
    {"keep_alive_interval", ConfKind::kPositiveSeconds},
    {"keep_alive_max_attempt", ConfKind::kCount},
    {"is_host", ConfKind::kBool},
    {"store_type", ConfKind::kText},
    {"etcd_prefix", ConfKind::kText},
    {"protocol", ConfKind::kText},
    // ddprun's: the token every connection to the job's store proves (c10d, static).
    {"auth_token_file", ConfKind::kText},
    // etcd with authentication on: the user the agents log in as.
    {"user", ConfKind::kText},
    {"password_file", ConfKind::kText},
    // etcd over TLS, with torchrun's etcd-v2 spellings beside etcd's own.
    {"cacert", ConfKind::kTlsFile},
    {"cert", ConfKind::kTlsFile},
    {"key", ConfKind::kTlsFile},
    {"ca_cert", ConfKind::kTlsFile},
    {"ssl_cert", ConfKind::kTlsFile},
    {"ssl_cert_key", ConfKind::kTlsFile},
};

// What torchrun's launcher gives the static and etcd backends as their `timeout` by default.
constexpr milliseconds kStaticEtcdTimeout{900'000};

// torchrun's older pair for the heartbeat: keep_alive_interval (5 s) x keep_alive_max_attempt (3).
constexpr milliseconds kKeepAliveInterval{5'000};
constexpr long kKeepAliveAttempts = 3;

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf conf;
  std::optional<milliseconds> keep_alive_interval;
  std::optional<long> keep_alive_attempts;
  // Keys and values trimmed, as torchrun's parse_rendezvous_config does.
  if (agent::trimmed(text).empty()) return conf;
  for (const std::string_view item : agent::split(agent::trimmed(text))) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || agent::trimmed(item.substr(0, eq)).empty()) {
      throw RefusedValue(fmt::format("argument --rdzv_conf: '{}' is not key=value", item));
    }
    const std::string key(agent::trimmed(item.substr(0, eq)));
    const std::string value(agent::trimmed(item.substr(eq + 1)));
    const auto kind = kRdzvConfKeys.find(key);
    if (kind == kRdzvConfKeys.end()) {
      throw RefusedValue(fmt::format("argument --rdzv_conf: unknown key '{}'", key));
    }
    const std::string what = "--rdzv_conf " + key;
    switch (kind->second) {
      case ConfKind::kPositiveSeconds: {
        const milliseconds s = parse_seconds(value, what);
        if (s.count() <= 0) {
          throw UsageError(fmt::format("argument --rdzv_conf: {} must be positive seconds", key));
        }
        if (key == "join_timeout") conf.join_timeout = s;
        if (key == "last_call_timeout") conf.last_call_timeout = s;
        if (key == "heartbeat_timeout") conf.heartbeat_timeout = s;
        if (key == "reconnect_timeout") conf.reconnect_timeout = s;
        if (key == "timeout") conf.timeout = s;
        if (key == "keep_alive_interval") keep_alive_interval = s;
        break;
      }
      case ConfKind::kSeconds:
        parse_seconds(value, what);  // checked; torchrun's store timeouts ddprun does not take
        break;
      case ConfKind::kCount:
        keep_alive_attempts = parse_integer(value, what);
        if (*keep_alive_attempts < 1) {
          throw UsageError(fmt::format("argument {}: must be at least 1", what));
        }
        break;
      case ConfKind::kBool:
        conf.is_host = parse_bool(value, what);
        break;
      case ConfKind::kText:
        if (key == "etcd_prefix") conf.etcd_prefix = value;
        if (key == "protocol") conf.protocol = value;
        if (key == "auth_token_file") conf.auth_token_file = value;
        if (key == "user") conf.user = value;
        if (key == "password_file") conf.password_file = value;
        if (key == "store_type" && lowered(value) != "tcp") {  // (torch lowers it too)
          throw RefusedValue(fmt::format(
              "argument --rdzv_conf: store_type={}: the job's store is a TCP store here (tcp); "
              "torch's FileStore rendezvous (file) is not supported",
              value));
        }
        break;
      case ConfKind::kTlsFile:
        conf.tls_files[key] = value;
        break;
    }
  }
  // How long a silent node stays a member: heartbeat_timeout, else the older pair.
  if (!conf.heartbeat_timeout && (keep_alive_interval || keep_alive_attempts)) {
    conf.heartbeat_timeout = keep_alive_interval.value_or(kKeepAliveInterval) *
                             keep_alive_attempts.value_or(kKeepAliveAttempts);
  }
  return conf;
}

// parse_rdzv_conf, its every refusal torchrun's after argparse (a ValueError as it reads the
// value): exit status 1.
RdzvConf rdzv_conf_of(const std::string& text) {
  try {
    return parse_rdzv_conf(text);
  } catch (const RefusedValue&) {
    throw;
  } catch (const UsageError& e) {
    throw RefusedValue(e.what());
  }
}

// TLS to the job's store: protocol=https, and each file under etcd's name or torchrun's etcd-v2
// one. Files alone imply https. (Loaded by check_tls.)
store::TlsFiles tls_files(const RdzvConf& conf) {
  const auto file = [&](const char* name, const char* torch_name) {
    const auto a = conf.tls_files.find(name), b = conf.tls_files.find(torch_name);
    if (a != conf.tls_files.end() && b != conf.tls_files.end() && a->second != b->second) {
      throw UsageError(
          fmt::format("--rdzv_conf: {} and {} name different files", name, torch_name));
    }
    return a != conf.tls_files.end()   ? a->second
           : b != conf.tls_files.end() ? b->second
                                       : std::string();
  };
  store::TlsFiles tls;
  tls.ca_file = file("cacert", "ca_cert");
  tls.cert_file = file("cert", "ssl_cert");
  tls.key_file = file("key", "ssl_cert_key");
  const bool files = !tls.ca_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty();
  if (!conf.protocol) {
    tls.enabled = files;
  } else if (*conf.protocol == "https") {
    tls.enabled = true;
  } else if (*conf.protocol != "http") {
    throw UsageError(fmt::format("--rdzv_conf protocol={}: must be http or https", *conf.protocol));
  } else if (files) {
    throw UsageError("--rdzv_conf: TLS files (cacert, cert, key) given with protocol=http");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    throw UsageError("--rdzv_conf: a certificate needs both cert and key");
  }
  return tls;
}

// Every TLS file is loaded here, so that a bad one is a usage error at once rather than a
// rendezvous that never forms. A store this node may host for the other agents (the static
// backend's node 0, a c10d agent that hosts its endpoint) serves TLS with cert and key.
void check_tls(const rendezvous::RendezvousConfig& r) {
  if (!r.tls.enabled) return;
  const bool may_host =
      !r.alone() && (r.backend == rendezvous::Backend::kStatic
                         ? r.node_rank == 0
                         : r.host_store != rendezvous::RendezvousConfig::HostStore::kNo);
  if (r.backend != rendezvous::Backend::kEtcdV3 && !r.auth_token) {
    // Encrypted but open to anyone who connects: not what https promises.
    throw UsageError(
        "--rdzv_conf protocol=https: TLS to ddprund and agent-hosted stores comes with a token "
        "(auth_token_file): TLS encrypts, the token says who may connect");
  }
  if (may_host && r.tls.cert_file.empty()) {
    throw UsageError(
        "--rdzv_conf protocol=https: this node may host the job's store (the static backend's "
        "node 0, or an agent on the endpoint's host; is_host=false if a ddprund serves it), which "
        "serves TLS with cert and key");
  }
  try {
    store::client_tls_context(r.tls);
    if (may_host) store::server_tls_context(r.tls);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--rdzv_conf: {}", e.what()));
  }
}

// --rdzv_conf auth_token_file: read once, here.
store::Token auth_token(const std::string& path, const rendezvous::RendezvousConfig& r) {
  if (r.backend == rendezvous::Backend::kEtcdV3) {
    throw UsageError(
        "--rdzv_conf auth_token_file: for the c10d and static backends; etcd authenticates with "
        "user and password_file");
  }
  if (r.run_id.find('/') != std::string::npos) {
    throw UsageError(fmt::format(
        "--rdzv_id={}: with a token, a run id has no '/' (its keys would hold another job's)",
        r.run_id));
  }
  try {
    return store::Token::from_file(path);
  } catch (const store::StoreError& e) {
    throw UsageError(fmt::format("--rdzv_conf auth_token_file: {}", e.what()));
  }
}

// --rdzv_conf user and password_file: the password is read once, here.
rendezvous::EtcdLogin etcd_login(const RdzvConf& conf, const rendezvous::RendezvousConfig& r) {
  if (r.backend != rendezvous::Backend::kEtcdV3) {
    throw UsageError(
        "--rdzv_conf user, password_file: for the etcd backend (ddprund's stores "
        "take auth_token_file)");
  }
  if (!conf.user || !conf.password_file || conf.user->empty()) {
    throw UsageError("--rdzv_conf: etcd's login needs both user and password_file");
  }
  std::ifstream in(*conf.password_file);
  std::string password;
  if (!in || !std::getline(in, password) || password.empty()) {
    throw UsageError(fmt::format("--rdzv_conf password_file={}: cannot read a password from it",
                                 *conf.password_file));
  }
  if (password.back() == '\r') password.pop_back();
  return rendezvous::EtcdLogin{*conf.user, password};
}

rendezvous::Backend parse_backend(const std::string& name) {
  if (name == "static") return rendezvous::Backend::kStatic;
  if (name == "c10d") return rendezvous::Backend::kC10d;
  if (name == "etcd-v3" || name == "etcd" || name == "etcd-v2") return rendezvous::Backend::kEtcdV3;
  throw RefusedValue(fmt::format(
      "--rdzv_backend: unknown backend '{}' (static, c10d, or etcd-v3 = etcd = etcd-v2)", name));
}

// host[:port], the host possibly an [IPv6] literal (or a bare one, which then has no port).
std::pair<std::string, int> parse_endpoint(const std::string& e, int default_port) {
  if (e.empty()) throw RefusedValue("--rdzv_endpoint: an empty endpoint");
  const size_t close = e.starts_with("[") ? e.find(']') : std::string::npos;
  if (e.starts_with("[") && close == std::string::npos) {
    throw RefusedValue(fmt::format("--rdzv_endpoint '{}': unterminated [IPv6] address", e));
  }
  const size_t colon = e.find(':', close == std::string::npos ? 0 : close);
  const bool bare_ipv6 = close == std::string::npos && e.find(':', colon + 1) != std::string::npos;
  const std::string host = close != std::string::npos ? e.substr(1, close - 1)
                           : bare_ipv6                ? e
                                                      : e.substr(0, colon);
  if (colon == std::string::npos || bare_ipv6) return {host, default_port};
  if (colon == 0) throw RefusedValue(fmt::format("--rdzv_endpoint '{}': no host", e));
  const std::string port = e.substr(colon + 1);
  const std::optional<long> p = python_int(port);  // (torch's int())
  if (!p || *p < 0 || *p > 65535) {
    throw RefusedValue(fmt::format("--rdzv_endpoint '{}': bad port", e));
  }
  return {host, static_cast<int>(*p)};
}

std::string nnodes_text(const RendezvousOptions& o) {
  return o.min_nodes == o.max_nodes ? std::to_string(o.max_nodes)
                                    : fmt::format("{}:{}", o.min_nodes, o.max_nodes);
}

// The etcd members named by --rdzv_endpoint; the first is also the endpoint.
void etcd_endpoints(const RendezvousOptions& o, rendezvous::RendezvousConfig& r) {
  if (o.endpoint.empty()) {
    throw UsageError("--rdzv_backend=etcd needs --rdzv_endpoint=HOST[:PORT][,HOST[:PORT]...]");
  }
  for (const std::string_view endpoint : agent::split(o.endpoint)) {
    const auto [host, port] = parse_endpoint(std::string(endpoint), 2379);
    if (port == 0) throw UsageError("--rdzv_endpoint: an etcd endpoint needs a port other than 0");
    r.etcd_endpoints.push_back(rendezvous::EtcdEndpoint{host, port});
  }
  r.endpoint_host = r.etcd_endpoints.front().host;
  r.endpoint_port = r.etcd_endpoints.front().port;
}

void check_static(const RendezvousOptions& o, const rendezvous::RendezvousConfig& r) {
  if (o.max_nodes == 1) return;
  if (o.min_nodes != o.max_nodes) {
    throw UsageError(fmt::format(
        "--nnodes={}: the static backend needs a fixed number of nodes; elastic MIN:MAX needs "
        "--rdzv_backend=c10d",
        nnodes_text(o)));
  }
  if (o.node_rank < 0 || o.node_rank >= o.max_nodes) {
    throw UsageError(fmt::format("--node_rank={} is not in [0, {})", o.node_rank, o.max_nodes));
  }
  if (r.store_port == 0) {
    throw UsageError("--master_port=0 cannot be found by the other nodes: give a port");
  }
}

}  // namespace

rendezvous::RendezvousConfig rendezvous_config(const RendezvousOptions& o) {
  const RdzvConf conf = rdzv_conf_of(o.conf);
  rendezvous::RendezvousConfig r;
  r.backend = parse_backend(o.backend);
  r.run_id = o.run_id;
  r.min_nodes = o.min_nodes;
  r.max_nodes = o.max_nodes;
  r.nproc = o.nproc;
  r.max_restarts = o.max_restarts;
  r.host = store::host_name();
  r.join_timeout = conf.join_timeout.value_or(r.join_timeout);
  if (r.backend != rendezvous::Backend::kC10d && !conf.join_timeout) {
    // torchrun's static and etcd rendezvous wait `timeout` for the nodes, 900 s unless given
    // (LaunchConfig's default); its c10d one join_timeout, 600 s.
    r.join_timeout = conf.timeout.value_or(kStaticEtcdTimeout);
  }
  r.heartbeat_timeout = conf.heartbeat_timeout.value_or(r.heartbeat_timeout);
  if (r.backend == rendezvous::Backend::kC10d && !o.endpoint.empty()) {
    std::tie(r.endpoint_host, r.endpoint_port) = parse_endpoint(o.endpoint, r.endpoint_port);
  }
  // torchrun's single node meets on the store its command line names, as several would: etcd's,
  // or a c10d endpoint's (hosted by this agent where it names this host and the port is free).
  // Only --standalone and a static job, whose store no other node can name, run alone.
  r.joins_store =
      r.backend == rendezvous::Backend::kEtcdV3 ||
      (r.backend == rendezvous::Backend::kC10d && !o.endpoint.empty() && r.endpoint_port != 0);
  r.tls = tls_files(conf);
  if (r.backend == rendezvous::Backend::kEtcdV3) {
    etcd_endpoints(o, r);
    if (conf.etcd_prefix) {
      if (!conf.etcd_prefix->starts_with("/")) {
        throw UsageError(
            fmt::format("--rdzv_conf etcd_prefix={}: must start with /", *conf.etcd_prefix));
      }
      r.etcd_prefix =
          conf.etcd_prefix->ends_with("/") ? *conf.etcd_prefix : *conf.etcd_prefix + "/";
    }
  }
  if (r.backend == rendezvous::Backend::kStatic) {
    // Node 0 hosts the store on every address; workers and the other nodes reach it at
    // master_addr, or at --rdzv_endpoint's host and port where it is given (torchrun's rule).
    r.store_port = o.master_port.value_or(rendezvous::RendezvousConfig::kStaticStorePort);
    r.master_addr = o.master_addr;
    if (!o.endpoint.empty()) {
      std::tie(r.master_addr, r.store_port) = parse_endpoint(o.endpoint, -1);
      if (r.store_port == -1) {
        throw RefusedValue(fmt::format(
            "--rdzv_endpoint '{}': the static backend needs the store's port in it", o.endpoint));
      }
    }
    r.endpoint_host = r.master_addr;
    r.node_rank = o.node_rank;
    check_static(o, r);
  } else if (!r.alone()) {
    if (r.backend == rendezvous::Backend::kC10d && o.endpoint.empty()) {
      throw UsageError(fmt::format(
          "--nnodes={}: a multi-node c10d job needs --rdzv_endpoint=HOST[:PORT] (every node the "
          "same), or it would wait on localhost for nodes that never come",
          nnodes_text(o)));
    }
    if (r.endpoint_port == 0) {
      throw UsageError("--rdzv_endpoint: port 0 cannot be found by other nodes");
    }
    r.local_addr = o.local_addr;
    r.last_call_timeout = conf.last_call_timeout.value_or(r.last_call_timeout);
    r.reconnect_timeout = conf.reconnect_timeout.value_or(r.reconnect_timeout);
    using HostStore = rendezvous::RendezvousConfig::HostStore;
    if (o.client_only) {
      r.host_store = HostStore::kNo;
    } else if (conf.is_host) {
      r.host_store = *conf.is_host ? HostStore::kYes : HostStore::kNo;
    } else if (r.backend == rendezvous::Backend::kC10d &&
               store::names_this_machine(r.endpoint_host)) {
      // torchrun's heuristic: an endpoint naming this machine is hosted by one of its agents (the
      // first to bind); a standalone ddprund there holds the port already and is used instead.
      r.host_store = HostStore::kIfFree;
    }
  } else {
    // Single-node c10d: the store listens on the endpoint's port; workers reach it on this host.
    r.store_port = r.endpoint_port;
    r.master_addr = o.local_addr.empty() ? "127.0.0.1" : o.local_addr;
  }
  if (conf.auth_token_file) r.auth_token = auth_token(*conf.auth_token_file, r);
  if (conf.user || conf.password_file) r.etcd_login = etcd_login(conf, r);
  check_tls(r);
  return r;
}

}  // namespace ddprun::launcher
