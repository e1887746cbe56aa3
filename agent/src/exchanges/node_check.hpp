#pragma once
// --node_check across the nodes of a round: each node publishes what its probe measured (topic
// "node_check_reports", the round's scope); node rank 0 judges every node against the round's
// medians and publishes the verdict (topic "node_check_verdict"), so that every node acts on the
// same one. A verdict that names a node measured slow is a suspicion, not yet a verdict: every node
// measures again, longer (pass 1, topics suffixed ".pass1"), and a node is kept out only where
// its probe gave no answer the first time (which is final) or the first measurement found it slow
// and the second slow or silent (a node found fast the first time stays in); a node that
// passed records itself as checked (topic "node_check_passed", the job's
// scope), and a round whose members all did needs no check. The verdict also goes to the job's
// scope (topic rendezvous::kNodeCheckTopic) for `ddprun status`. The straggler check measures the
// links again while the workers train, as measurements 2, 3, ... (exchange() with those passes;
// their verdicts stay in the round's scope). Built on the rendezvous' exchange.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"
#include "node/probe_report.hpp"

namespace ddprun::agent::node_check {

struct SlowNode {
  int node_rank = 0;
  std::string probe;   // "compute", "link", or "no answer"
  double ratio = 0;    // how many times the round's median (0: no answer, or beyond measure)
  std::string detail;  // what was measured against what, or why nothing was
};

struct Verdict {
  int nodes = 0;
  double factor = 0;
  double compute_median = 0;  // seconds per kernel, of the kind most nodes ran
  double link_median = 0;     // of each node's fastest all-reduce, seconds (0: none measured)
  std::vector<SlowNode> slow;

  // The node of that rank, if it is kept out.
  const SlowNode* kept_out(int node_rank) const;
  // Whether it names a node measured slow (not only nodes that gave no answer): a suspicion to
  // measure again before acting on it.
  bool needs_confirmation() const;
  nlohmann::json to_json() const;
  static std::optional<Verdict> from_json(const std::string& text);
};

// Judges `reports` (at most one per node rank below `nodes`; a missing one is a node that did not
// answer): a node whose compute kernel took more than `factor` times the median of the nodes that
// answered with a kernel of its kind (cpu, gpu) is slow in compute (a report of the links only is
// not judged on its compute); one whose fastest link
// measurement took more than `factor` times the median of every node's fastest, or none of whose
// link measurements completed (ratio 0), is slow in its link, except that a node measured once,
// with a partner slow with two partners or more, is not (that partner explains it); links with a
// node that gave no answer are not judged.
Verdict judge(const std::vector<ProbeReport>& reports, int nodes, double factor);

// The verdict of a confirmation: `second`'s figures; slow, the nodes that gave no answer in
// `first`, and those `first` found slow that `second` found slow or silent (as `second` found
// them). A node `first` found neither slow nor silent stays in, whatever `second` found of it.
Verdict confirmed(const Verdict& first, const Verdict& second);

// Whether `r` has a member that has not passed a node check of this job (true where `r` does not
// name its members).
boost::asio::awaitable<bool> needed(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                    rendezvous::Round r);
// Publishes `mine`, the measurement of pass `pass`; node rank 0 waits (up to `wait`) for every
// node's, judges them with `factor` (given `first`, the previous pass's verdict, confirmed()
// against it, and a warning for each node it names that `first` did not) and publishes the
// verdict. Returns the verdict, or nullopt where the round ended (or twice
// `wait` passed) before it came. Never throws.
boost::asio::awaitable<std::optional<Verdict>> exchange(
    std::shared_ptr<rendezvous::Rendezvous> rdzv, rendezvous::Round r, int pass, ProbeReport mine,
    double factor, std::chrono::milliseconds wait, std::optional<Verdict> first);
// Records this node (member `r.node_rank` of `r`) as checked. Never throws.
boost::asio::awaitable<void> passed(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                    rendezvous::Round r);

}  // namespace ddprun::agent::node_check
