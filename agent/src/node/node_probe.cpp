#include "node/node_probe.hpp"

#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "node/bounded_command.hpp"

namespace ddprun::agent {
namespace {

// `s` as one word for /bin/sh.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

boost::asio::awaitable<ProbeReport> run_node_probe(boost::asio::io_context& io,
                                                   Containment& containment,
                                                   const NodeProbeRun& how,
                                                   const rendezvous::Round& round,
                                                   const rendezvous::WorkerStoreAddress& store) {
  const std::string name = how.pass == 0
                               ? fmt::format("node_check.{}", round.number)
                               : fmt::format("node_check.{}.pass{}", round.number, how.pass);
  const std::string report = (how.dir / (name + ".report")).string();
  const std::string log = (how.dir / (name + ".log")).string();
  std::error_code ignored;
  std::filesystem::remove(report, ignored);
  // The probe stops itself a little before the agent would kill it, so that it says why.
  const auto own_limit = how.timeout * 9 / 10;
  std::string command = fmt::format(
      "exec {} --rank {} --nodes {} --store {} --run {} --round {} --report {} --timeout-ms {}",
      quoted(how.program), round.node_rank, round.num_nodes,
      quoted(fmt::format("{}:{}", store.addr, store.port)), quoted(how.run_id), round.number,
      quoted(report), own_limit.count());
  if (how.gpu) command += " --gpu 0";
  if (how.pass > 0) command += fmt::format(" --pass {}", how.pass);
  if (how.link_kib > 0) command += fmt::format(" --link-kib {}", how.link_kib);
  if (how.links_only) command += " --measure links";
  const std::optional<std::string> failed =
      co_await run_bounded_command(io, containment, command, how.timeout, how.env, log);
  if (failed) co_return ProbeReport::failure(round.node_rank, "the probe failed: " + *failed);
  std::ifstream in(report);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::optional<ProbeReport> r = ProbeReport::parse(
      text, round.node_rank,
      how.links_only ? ProbeReport::Measured::kLinks : ProbeReport::Measured::kAll);
  if (!r) co_return ProbeReport::failure(round.node_rank, "the probe's report is malformed");
  co_return std::move(*r);
}

}  // namespace ddprun::agent
