#pragma once
// The straggler check across the nodes of a round: each node publishes its ranks' latest window
// of steps (topic "step_times", the round's scope) — how long a step took, how much of it its
// slowest rank computed and how much that rank waited for the others in collectives; node rank 0
// judges them (Judge) and, for a verdict, publishes it (topic rendezvous::kStragglerTopic, the
// job's scope, for `ddprun status`) and, to replace the node, raises the round's flag "straggler"
// naming it. Built on the rendezvous' exchange.
//
// A node is lagging in a set of windows when the steps would be more than `threshold` shorter
// without its excess compute over the median of the other nodes (held_back = excess / (step -
// excess)) and it waits less than the median of the others: the one the others wait for. It is
// named slow once it lagged in consecutive sets covering `steps` steps, and three sets at least:
// a one-off slow step or a pause of the data loader is not a verdict.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"
#include "watchers/step_times_file.hpp"

namespace ddprun::agent::straggler {

// One node's steps between two readings of its ranks' totals.
struct NodeWindow {
  int node_rank = 0;
  uint64_t seq = 0;      // the node's windows, counted from 1 in a round
  int64_t steps = 0;     // steps every one of its ranks timed in it
  double step_s = 0;     // a step's mean time, over its ranks
  double compute_s = 0;  // of its rank that computed longest, per step
  double wait_s = 0;     // that rank's wait for the others, per step

  nlohmann::json to_json() const;
  static std::optional<NodeWindow> from_json(const std::string& text);
};

// The window between `before` and `now` (each local rank's totals), or nullopt where a rank
// timed fewer than `min_steps` steps since (a rank missing from either counts as none).
std::optional<NodeWindow> window(const std::map<int, StepTotals>& before,
                                 const std::map<int, StepTotals>& now, int64_t min_steps);

// A node found lagging.
struct Lagging {
  int node_rank = 0;
  double held_back = 0;      // how much longer its lag makes each step (0.41: 41%)
  double compute_ratio = 0;  // its compute per step against the others' median
  double wait_ratio = 0;     // its wait against the others' median (0 where they do not wait)
  double step_s = 0;         // the step's time
  int64_t steps = 0;         // consecutive steps it lagged in (a verdict's)
};

// The node (of `windows`, one per node) lagging most beyond `threshold`, if any.
std::optional<Lagging> lagging(const std::vector<NodeWindow>& windows, double threshold);

// Node rank 0's judgment over a round's windows as they come.
class Judge {
 public:
  Judge(double threshold, int steps) : threshold_(threshold), steps_(steps) {}
  // The windows gathered last (any number per call, any node's): once every one of `nodes` nodes
  // has a window newer than the last set judged, that set is judged. A verdict for a node that
  // lagged long enough, once per node.
  std::optional<Lagging> add(const std::vector<NodeWindow>& windows, int nodes);

 private:
  double threshold_;
  int steps_;
  std::map<int, NodeWindow> latest_;  // by node rank
  std::map<int, uint64_t> judged_;    // the seq of each node's window last judged
  std::optional<int> suspect_;
  int64_t suspect_steps_ = 0;
  int suspect_sets_ = 0;
  std::vector<int> named_;
};

// "node 2 (host) holds every step back by 41%: its ranks compute 1.70x the others' median and
// wait 0.10x theirs, for 6 steps".
std::string describe(const Lagging& l, const std::string& host);

// Publishes this node's window. Never throws (a store error is logged).
boost::asio::awaitable<void> publish(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                     rendezvous::Round r, NodeWindow mine);
// Every node's latest window, as far as published (no wait).
boost::asio::awaitable<std::vector<NodeWindow>> latest(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r);
// The round's flag that names a node to replace: raised by node rank 0 (`detail` the node rank).
inline constexpr const char* kReplaceFlag = "straggler";
// The node rank the round's flag names, if it was raised.
std::optional<int> replaced(const rendezvous::Rendezvous& rdzv, const rendezvous::Round& r);

}  // namespace ddprun::agent::straggler
