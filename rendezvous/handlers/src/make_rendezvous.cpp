#include <unistd.h>

#include <random>

#include <fmt/format.h>

#include "ddprun/job_store/etcd_job_store.hpp"
#include "ddprun/job_store/tcp_job_store.hpp"
#include "ddprun/rendezvous/elastic_rendezvous.hpp"
#include "ddprun/rendezvous/rendezvous_config.hpp"
#include "ddprun/store/errors.hpp"
#include "local_rendezvous.hpp"
#include "static_rendezvous.hpp"

namespace ddprun::rendezvous {

namespace {

EtcdJobStoreSpec etcd_spec(const RendezvousConfig& c) {
  return EtcdJobStoreSpec{c.etcd_endpoints,    c.etcd_prefix,       c.run_id, c.join_timeout,
                          c.heartbeat_timeout, c.reconnect_timeout, c.tls,    c.etcd_login};
}

// The static backend's store is node 0's, at its store port; c10d's at the endpoint.
TcpJobStoreSpec tcp_spec(const RendezvousConfig& c) {
  const int port = c.backend == Backend::kStatic ? c.store_port : c.endpoint_port;
  return TcpJobStoreSpec{c.run_id,
                         c.endpoint_host,
                         port,
                         c.join_timeout,
                         c.heartbeat_timeout,
                         c.reconnect_timeout,
                         c.auth_token,
                         c.tls};
}

}  // namespace

// The job's store as a client sees it (no server, no handler): for `ddprun status`.
std::shared_ptr<JobStore> make_job_store(boost::asio::io_context& io, const RendezvousConfig& c) {
  if (c.backend == Backend::kEtcdV3) {
    return std::make_shared<EtcdJobStore>(io.get_executor(), etcd_spec(c));
  }
  return std::make_shared<TcpJobStore>(io.get_executor(), tcp_spec(c));
}

std::shared_ptr<Rendezvous> make_rendezvous(boost::asio::io_context& io,
                                            const RendezvousConfig& c) {
  if (c.alone()) return std::make_shared<LocalRendezvous>(io, c);
  std::unique_ptr<store::StoreThread> server;
  if (c.backend == Backend::kStatic) {
    if (c.node_rank == 0) {
      store::ServerOptions o;
      o.host = c.store_host;
      o.port = static_cast<uint16_t>(c.store_port);
      o.in_agent = true;
      o.secret = c.auth_token;
      o.tls = store::server_tls_context(c.tls);
      server = std::make_unique<store::StoreThread>(o);
    }
    auto store = std::make_shared<TcpJobStore>(io.get_executor(), tcp_spec(c));
    return StaticRendezvous::create(io, c, store, std::move(server));
  }
  std::string node_id = fmt::format("{}_{}_{:x}", c.host, ::getpid(), std::random_device{}());
  if (c.backend == Backend::kEtcdV3) {
    auto store = std::make_shared<EtcdJobStore>(io.get_executor(), etcd_spec(c));
    return ElasticRendezvous::create(io, c, std::move(node_id), store, nullptr);
  }
  if (c.host_store != RendezvousConfig::HostStore::kNo) {
    store::ServerOptions o;
    o.port = static_cast<uint16_t>(c.endpoint_port);
    o.in_agent = true;
    o.secret = c.auth_token;
    o.tls = store::server_tls_context(c.tls);
    try {
      server = std::make_unique<store::StoreThread>(o);
    } catch (const store::StoreError&) {
      // Another agent (or a ddprund) on this host got there first: use its store.
      if (c.host_store == RendezvousConfig::HostStore::kYes) throw;
    }
  }
  auto store = std::make_shared<TcpJobStore>(io.get_executor(), tcp_spec(c));
  return ElasticRendezvous::create(io, c, std::move(node_id), store, std::move(server));
}

}  // namespace ddprun::rendezvous
