#pragma once
// The rendezvous's options read once into the complete configuration the agent's handler is built
// from (rendezvous_config.hpp): --rdzv_backend, --rdzv_endpoint, --rdzv_id, --rdzv_conf, --nnodes,
// --node_rank, --master_addr, --master_port, --local_addr. Every default is RendezvousConfig's own;
// nothing here repeats one.
#include <optional>
#include <string>

#include "ddprun/rendezvous/rendezvous_config.hpp"

namespace ddprun::launcher {

// The options as given (or filled in by a workload manager, a head-node launch, --standalone),
// --nnodes and --node_rank already numbers.
struct RendezvousOptions {
  std::string backend = "static";
  std::string endpoint;
  std::string run_id = "none";
  std::string conf;  // --rdzv_conf: key=value,...
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;  // the static backend's default is RendezvousConfig's store port
  std::string local_addr;
  int nproc = 1;  // this node's workers
  int max_restarts = 0;
  // A client of the job's store that never hosts it (ddprun status).
  bool client_only = false;
};

// The configuration, complete (this machine's name included). Throws RefusedValue (text argparse
// takes, torchrun refuses later: exit 1) for an unknown backend, a malformed endpoint and any
// --rdzv_conf key or value torchrun refuses; UsageError (ddprun's own refusals, exit 2) for TLS
// files that cannot be loaded and node counts or ranks the backend cannot meet with.
rendezvous::RendezvousConfig rendezvous_config(const RendezvousOptions& options);

}  // namespace ddprun::launcher
