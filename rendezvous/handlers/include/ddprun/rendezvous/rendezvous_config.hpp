#pragma once
// Everything that chooses and configures a job's rendezvous, and the one place that builds it.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "ddprun/job_store/etcd_endpoint.hpp"
#include "ddprun/job_store/job_timeouts.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/store/auth.hpp"
#include "ddprun/store/tls.hpp"

namespace ddprun::rendezvous {

// --rdzv_backend, parsed once by the launcher. kEtcdV3 is also what torchrun's "etcd" and "etcd-v2"
// name: they mean "a highly available rendezvous on etcd", spoken here over the v3 API.
enum class Backend { kStatic, kC10d, kEtcdV3 };

// One home for each default: the launcher fills in only what a command line gave.
struct RendezvousConfig {
  // The static backend's store port when none is given (torchrun's --master_port default).
  static constexpr int kStaticStorePort = 29500;

  Backend backend = Backend::kStatic;
  std::string run_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  // A single node's job that names a store to meet on (an etcd cluster, a c10d endpoint whose
  // port is not 0): it joins it as any node would, as torchrun does.
  bool joins_store = false;
  // One node running alone around a store of its own, which no other agent can reach.
  bool alone() const { return max_nodes == 1 && !joins_store; }
  int node_rank = 0;  // static backend
  int nproc = 1;      // this node's workers
  int max_restarts = 0;
  std::string host;  // this node's name, as peers print it
  // The job's store. Static: node 0's agent hosts it at store_host:store_port (empty host: every
  // address) and the others reach it at endpoint_host:store_port. c10d: at endpoint_host:
  // endpoint_port, hosted by this agent when host_store says so.
  std::string endpoint_host = "127.0.0.1";
  int endpoint_port = 29400;
  std::string store_host;
  int store_port = 0;  // 0: the OS picks (single node)
  enum class HostStore { kNo, kYes, kIfFree } host_store = HostStore::kNo;
  // What workers are told as MASTER_ADDR when this node hosts their store: a single node's and the
  // static backend's; empty on c10d: the address that routes towards the endpoint.
  std::string master_addr = "127.0.0.1";
  std::string local_addr;  // c10d, etcd: advertised for this node's per-round worker store
  // etcd: the cluster's members (endpoint_host/port is the first) and the prefix of every key.
  std::vector<EtcdEndpoint> etcd_endpoints;
  std::string etcd_prefix = "/ddprun/";
  std::optional<EtcdLogin> etcd_login{};  // rdzv_conf user, password_file
  std::chrono::milliseconds join_timeout = kDefaultJoinTimeout;
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
  // c10d: how long agents ride out losing a standalone store (ddprund), workers running.
  std::chrono::milliseconds reconnect_timeout = kDefaultReconnectTimeout;
  std::chrono::milliseconds last_call_timeout{30'000};
  std::chrono::milliseconds barrier_timeout{300'000};
  // --rdzv_conf auth_token_file (static, c10d): the job's connections to its store authenticate
  // with it, and a store this node hosts for agents serves only those that hold it.
  std::optional<store::Token> auth_token{};
  // rdzv_conf protocol=https, cacert, cert, key: TLS to the job's store (etcd's members, ddprund or
  // the agent that hosts it). A store this node hosts for agents serves TLS with cert and key, and
  // asks every agent for a certificate signed by cacert.
  store::TlsFiles tls{};
};

// The handler for `config`: one node alone (`alone()`) runs around its own store; the static
// backend with several nodes (static_rendezvous.hpp); c10d and etcd with several
// (elastic_rendezvous.hpp, over a TcpJobStore or an EtcdJobStore). Binds the stores this node hosts
// before returning: throws StoreError when a port is taken.
std::shared_ptr<Rendezvous> make_rendezvous(boost::asio::io_context& io,
                                            const RendezvousConfig& config);

class JobStore;
// The job's store as a client of it (no handler, no server hosted): the static backend's and
// c10d's TcpJobStore, or an EtcdJobStore.
std::shared_ptr<JobStore> make_job_store(boost::asio::io_context& io,
                                         const RendezvousConfig& config);

}  // namespace ddprun::rendezvous
