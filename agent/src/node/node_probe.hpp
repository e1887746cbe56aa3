#pragma once
// Runs ddprun-node-probe for this node's part in a round's node check (--node_check), bounded by
// --node_check_timeout and contained like the health check. Private to the agent.
#include <chrono>
#include <filesystem>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "ddprun/agent/environment.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "node/containment.hpp"
#include "node/probe_report.hpp"

namespace ddprun::agent {

struct NodeProbeRun {
  std::string program;  // the probe
  std::string run_id;
  std::chrono::milliseconds timeout{30'000};
  Environment env;
  std::filesystem::path dir;  // where its report and its log (node_check.<round>.*) go
  bool gpu = false;           // the node has GPUs: the compute kernel runs on the first visible
  int pass = 0;               // even: a measurement (0 the node check's); odd: its confirmation
  int link_kib = 0;           // the buffer each link all-reduces (0: the probe's own, 4 MiB)
  bool links_only = false;    // no compute kernel: the report has links only
};

// The probe's measurements as node `round.node_rank` of `round`, its pairs meeting through the
// round's worker store `store`; a report that says why it failed (a non-zero exit, the timeout, a
// malformed report) rather than throwing. Cancelled (the agent stops), it throws as
// run_bounded_command does.
boost::asio::awaitable<ProbeReport> run_node_probe(boost::asio::io_context& io,
                                                   Containment& containment,
                                                   const NodeProbeRun& how,
                                                   const rendezvous::Round& round,
                                                   const rendezvous::WorkerStoreAddress& store);

}  // namespace ddprun::agent
