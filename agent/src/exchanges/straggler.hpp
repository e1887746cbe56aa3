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
// named slow once it lagged in consecutive sets covering `steps` steps, and three sets at least,
// and its lag beyond the threshold added up to two steps' time over them (a node just beyond the
// threshold must lag for longer): a one-off slow step, a pause of the data loader or a
// neighbour's bursts of CPU time are not a verdict.
//
// A slow link lags no node: every node waits longer for the collectives. The job's pace (each
// set's median step) is measured over its first sets; where the steps then take more than
// `threshold` longer for as many steps in a row, no node lagging, and the waits carry a good share
// of the growth, the job slowed in its communication (Slowdown): the agents then measure their
// links as the node check does, and a node whose link that measurement finds slow is named.
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

// The job's steps slower than its pace, the waits grown with them.
struct Slowdown {
  double step_s = 0;       // the step's time now (the median node's)
  double pace_s = 0;       // the step's time in the sets that set the pace
  double wait_s = 0;       // the median node's wait per step now
  double pace_wait_s = 0;  // and in the pace's sets
  int64_t steps = 0;       // consecutive steps that slow
  double held_back() const { return pace_s > 0 ? step_s / pace_s - 1 : 0; }
};

// The job's pace over a round's sets of windows, and a slowdown from it.
class Pace {
 public:
  Pace(double threshold, int steps) : threshold_(threshold), steps_(steps) {}
  // The next set (one window per node), and whether a node lagged in it. A slowdown once it held
  // for `steps` steps and three sets in a row; then none until rebase().
  std::optional<Slowdown> add(const std::vector<NodeWindow>& set, bool a_node_lagged);
  // The pace is measured again from the next sets (the slowdown was looked into and is the job's).
  void rebase();
  // Sets that set the pace.
  static constexpr size_t kPaceSets = 6;

 private:
  double threshold_;
  int steps_;
  std::vector<double> steps_s_, waits_s_;  // the pace's sets' medians
  int64_t slow_steps_ = 0;
  int slow_sets_ = 0;
  bool said_ = false;
};

// What one complete set of windows showed.
struct Judgement {
  std::optional<Lagging> lagging;    // a verdict on a node (once per node)
  std::optional<Slowdown> slowdown;  // the whole job slower, in its waits
};

// Node rank 0's judgment over a round's windows as they come.
class Judge {
 public:
  Judge(double threshold, int steps)
      : threshold_(threshold), steps_(steps), pace_(threshold, steps) {}
  // The windows gathered last (any number per call, any node's): once every one of `nodes` nodes
  // has a window newer than the last set judged, that set is judged. A verdict for a node that
  // lagged long enough, once per node; a slowdown of the whole job, once until rebase().
  Judgement add(const std::vector<NodeWindow>& windows, int nodes);
  // The slowdown was looked into: the job's pace is measured again.
  void rebase() { pace_.rebase(); }

 private:
  double threshold_;
  int steps_;
  Pace pace_;
  std::map<int, NodeWindow> latest_;  // by node rank
  std::map<int, uint64_t> judged_;    // the seq of each node's window last judged
  std::optional<int> suspect_;
  int64_t suspect_steps_ = 0;
  int suspect_sets_ = 0;
  double suspect_lag_ = 0;    // its lag beyond the threshold so far, in steps
  double suspect_lag_s_ = 0;  // and in seconds
  std::vector<int> named_;
};

// "node 2 (host) holds every step back by 41%: its ranks compute 1.70x the others' median and
// wait 0.10x theirs, for 6 steps".
std::string describe(const Lagging& l, const std::string& host);
// "node 2 (host) holds every step back by 55%: its link is 3.10x slower than the round's median
// (<what was measured>); the job's steps take 1.55x their pace, in the waits (0.240 s a step,
// 6 steps in a row)".
std::string describe_link(const Slowdown& s, int node_rank, const std::string& host,
                          double link_ratio, const std::string& measured);

// Publishes this node's window. Never throws (a store error is logged).
boost::asio::awaitable<void> publish(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                     rendezvous::Round r, NodeWindow mine);
// Every node's latest window, as far as published (no wait).
boost::asio::awaitable<std::vector<NodeWindow>> latest(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r);
// Node rank 0 asks every node of `r` to measure its links, as measurement `first_pass` (topic
// "link_probe"). Never throws.
boost::asio::awaitable<void> ask_for_links(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                           rendezvous::Round r, int first_pass);
// The measurement node rank 0 asked for last in `r`, if it did (no wait; a store error is none).
boost::asio::awaitable<std::optional<int>> links_asked(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r);
// The round's flag that names a node to replace: raised by node rank 0 (`detail` the node rank).
inline constexpr const char* kReplaceFlag = "straggler";
// The node rank the round's flag names, if it was raised.
std::optional<int> replaced(const rendezvous::Rendezvous& rdzv, const rendezvous::Round& r);

}  // namespace ddprun::agent::straggler
