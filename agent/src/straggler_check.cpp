#include "straggler_check.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "exchanges/straggler.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;

namespace {

// How often a node reads its ranks' totals and shares a window: four times a second, less often
// in a job so large that the store would take more than a few thousand windows a second.
std::chrono::milliseconds period_for(int nodes) {
  return std::max(std::chrono::milliseconds(250), std::chrono::milliseconds(nodes / 4));
}

// A round's workers that timed no step by then are said not to be measured.
constexpr auto kUnmeasuredAfter = std::chrono::seconds(120);

// The links are measured again at most this often (a measurement costs the job a few seconds of
// its links and CPUs).
constexpr auto kLinksMeasuredAtMostEvery = std::chrono::seconds(30);

// Measurements 0 and 1 of a round are the node check's before its workers start.
constexpr int kFirstLinkPass = 2;

}  // namespace

struct StragglerCheck::RoundWatch {
  RoundWatch(asio::io_context& io, rendezvous::Round r, LinkMeasure m)
      : timer(io), round(std::move(r)), measure(std::move(m)) {}
  asio::steady_timer timer;
  rendezvous::Round round;
  LinkMeasure measure;
  asio::cancellation_signal stop_measuring;  // emitted when the round ends
  bool ended = false;
  // Node rank 0 named a node's link in this round: the compute/wait split of the others' steps is
  // no longer one of compute (a slow link's traffic delays a node's own work too: node 0 of a job
  // whose node 2 sent at 200 Mbit/s was named for 1.31x the median's compute after the link was),
  // so no node is named for its compute in the rest of the round.
  bool link_named = false;
  int measured = 0;  // the last measurement of the links this node took part in (0: none)
  std::optional<std::chrono::steady_clock::time_point> links_measured;  // node rank 0: when
};

StragglerCheck::StragglerCheck(asio::io_context& io, const AgentConfig& cfg,
                               std::shared_ptr<rendezvous::Rendezvous> rdzv, EventLog& events)
    : io_(io),
      cfg_(cfg),
      rdzv_(std::move(rdzv)),
      events_(events),
      watched_(cfg.straggler.watched() && cfg.rdzv.max_nodes > 1) {}

StragglerCheck::~StragglerCheck() { round_ended(); }

void StragglerCheck::round_started(const rendezvous::Round& r, LinkMeasure measure) {
  round_ended();
  if (!watched_ || r.num_nodes < 2) return;
  round_ = std::make_shared<RoundWatch>(io_, r, std::move(measure));
  asio::co_spawn(io_, watch(round_), asio::detached);
}

void StragglerCheck::round_ended() {
  if (!round_) return;
  round_->ended = true;
  round_->timer.cancel();
  round_->stop_measuring.emit(asio::cancellation_type::terminal);
  round_.reset();
}

asio::awaitable<void> StragglerCheck::watch(std::shared_ptr<RoundWatch> w) {
  // What this coroutine uses after a suspension is held by it (or checked through w->ended: the
  // check may be gone once the round ended).
  const rendezvous::Round r = w->round;
  const std::shared_ptr<rendezvous::Rendezvous> rdzv = rdzv_;
  const std::shared_ptr<StepSamples> samples = samples_;
  straggler::Judge judge(cfg_.straggler.threshold, cfg_.straggler.steps);
  std::map<int, StepTotals> before;
  // Until this round's workers start, the samples are the last round's (its attempt's totals).
  const uint64_t last_rounds = samples->attempt;
  uint64_t attempt = last_rounds;
  uint64_t seq = 0;
  auto attempt_began = std::chrono::steady_clock::now();
  bool timed = false;  // a rank of the attempt timed a step
  bool said = false;   // that none did, said once a round
  for (;;) {
    w->timer.expires_after(period_for(r.num_nodes));
    co_await w->timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (w->ended) co_return;
    if (samples->attempt == last_rounds) continue;
    if (samples->attempt != attempt) {  // the round's workers started: totals from zero
      attempt = samples->attempt;
      before.clear();
      attempt_began = std::chrono::steady_clock::now();
      timed = false;
    }
    for (const auto& [rank, totals] : samples->ranks) timed = timed || totals.steps > 0;
    if (!timed && !said && std::chrono::steady_clock::now() - attempt_began > kUnmeasuredAfter) {
      said = true;
      spdlog::warn(
          "straggler check: this node's workers timed no step in {} s: theirs are not measured "
          "(Python workers: torch 2.0 or later and an optimizer's step(), and no sitecustomize "
          "ahead of ddprun's on PYTHONPATH that does not run the next one; native workers: "
          "libddp's step timing); --straggler_threshold=0 turns the check off",
          std::chrono::duration_cast<std::chrono::seconds>(kUnmeasuredAfter).count());
    }
    if (std::optional<straggler::NodeWindow> mine = straggler::window(before, samples->ranks, 1)) {
      mine->node_rank = r.node_rank;
      mine->seq = ++seq;
      before = samples->ranks;
      co_await straggler::publish(rdzv, r, *mine);
      if (w->ended) co_return;
    }
    // Nodes read the exchange once they timed steps themselves: a job whose steps are not
    // measured costs the store nothing, not even a followed prefix (with one followed, a store
    // restart made elastic.the_store_restarting_costs_no_restart see a node leave in 4 runs of
    // 16: a fault of the store's reconnection, not yet found).
    if (seq == 0) continue;
    if (r.node_rank != 0) {
      co_await measure_when_asked(w);
      if (w->ended) co_return;
      continue;
    }
    const std::vector<straggler::NodeWindow> windows = co_await straggler::latest(rdzv, r);
    if (w->ended) co_return;
    const straggler::Judgement judged = judge.add(windows, r.num_nodes);
    if (judged.slowdown && !judged.lagging) {
      co_await look_into_links(w, *judged.slowdown, judge);
      if (w->ended) co_return;
    }
    const std::optional<straggler::Lagging>& slow = judged.lagging;
    if (!slow || w->link_named) continue;
    const std::string id = r.member(slow->node_rank);
    const nlohmann::json verdict = {{"round", r.number},
                                    {"node_rank", slow->node_rank},
                                    {"node", id},
                                    {"held_back", slow->held_back},
                                    {"compute_ratio", slow->compute_ratio},
                                    {"wait_ratio", slow->wait_ratio},
                                    {"step_s", slow->step_s},
                                    {"steps", slow->steps},
                                    {"threshold", cfg_.straggler.threshold}};
    co_await act(r, slow->node_rank, verdict, straggler::describe(*slow, id));
    if (w->ended) co_return;
  }
}

asio::awaitable<std::optional<node_check::Verdict>> StragglerCheck::links_measured(
    std::shared_ptr<RoundWatch> w, int first_pass) {
  try {
    co_return co_await asio::co_spawn(
        io_, w->measure(first_pass),
        asio::bind_cancellation_slot(w->stop_measuring.slot(), asio::use_awaitable));
  } catch (const std::exception& e) {  // the round ended meanwhile
    spdlog::debug("straggler check: the links' measurement ended: {}", e.what());
    co_return std::nullopt;
  }
}

asio::awaitable<void> StragglerCheck::measure_when_asked(std::shared_ptr<RoundWatch> w) {
  const std::optional<int> asked = co_await straggler::links_asked(rdzv_, w->round);
  if (w->ended || !asked || *asked <= w->measured) co_return;
  w->measured = *asked;
  spdlog::info("straggler check: measuring this node's links again, as node rank 0 asks");
  co_await links_measured(w, *asked);
}

asio::awaitable<void> StragglerCheck::look_into_links(std::shared_ptr<RoundWatch> w,
                                                      straggler::Slowdown slowed,
                                                      straggler::Judge& judge) {
  const rendezvous::Round r = w->round;
  const auto now = std::chrono::steady_clock::now();
  if (w->links_measured && now - *w->links_measured < kLinksMeasuredAtMostEvery) {
    judge.rebase();
    co_return;
  }
  w->links_measured = now;
  if (cfg_.node_probe.empty()) {
    spdlog::warn(
        "straggler check: the job's steps take {:.2f}x their pace, the waits grown and no node "
        "lagging: a link may be slow, but this installation has no ddprun-node-probe "
        "to measure the links with (the Debian package and a build from source have it)",
        slowed.step_s / slowed.pace_s);
    judge.rebase();
    co_return;
  }
  const int pass = w->measured == 0 ? kFirstLinkPass : w->measured + 2;
  w->measured = pass;
  spdlog::info(
      "straggler check: the job's steps take {:.2f}x their pace ({:.3f} s against {:.3f} s), "
      "the waits grown ({:.3f} s against {:.3f} s) and no node lagging: every node "
      "measures its links",
      slowed.step_s / slowed.pace_s, slowed.step_s, slowed.pace_s, slowed.wait_s,
      slowed.pace_wait_s);
  co_await straggler::ask_for_links(rdzv_, r, pass);
  if (w->ended) co_return;
  const std::optional<node_check::Verdict> verdict = co_await links_measured(w, pass);
  if (w->ended) co_return;
  // The slowest link named (ratio 0: its all-reduces never completed, the slowest of all).
  std::optional<node_check::SlowNode> slowest;
  for (const node_check::SlowNode& s :
       verdict ? verdict->slow : std::vector<node_check::SlowNode>()) {
    if (s.probe == "link" &&
        (!slowest || (slowest->ratio > 0 && (s.ratio == 0 || s.ratio > slowest->ratio)))) {
      slowest = s;
    }
  }
  if (!slowest) {
    spdlog::info(
        "straggler check: no node's link measured slow ({}): the job's pace is measured "
        "again",
        verdict ? fmt::format("every link within {:g}x the round's median", verdict->factor)
                : std::string("the measurement did not complete"));
    judge.rebase();
    co_return;
  }
  const std::string id = r.member(slowest->node_rank);
  const nlohmann::json fields = {{"round", r.number},
                                 {"node_rank", slowest->node_rank},
                                 {"node", id},
                                 {"cause", "link"},
                                 {"held_back", slowed.held_back()},
                                 {"link_ratio", slowest->ratio},
                                 {"link", slowest->detail},
                                 {"step_s", slowed.step_s},
                                 {"pace_s", slowed.pace_s},
                                 {"steps", slowed.steps},
                                 {"threshold", cfg_.straggler.threshold}};
  w->link_named = true;
  co_await act(
      r, slowest->node_rank, fields,
      straggler::describe_link(slowed, slowest->node_rank, id, slowest->ratio, slowest->detail));
}

asio::awaitable<void> StragglerCheck::act(const rendezvous::Round& r, int node_rank,
                                          nlohmann::json verdict, std::string line) {
  std::string action = "report";
  std::string why;
  if (cfg_.straggler.action == StragglerPolicy::Action::kReplace) {
    const int spares = present_ - r.num_nodes;
    if (rdzv_->membership_fixed()) {
      why = "a static job's nodes are fixed: none can take its place";
    } else if (r.num_nodes <= cfg_.rdzv.min_nodes && spares <= 0) {
      why = fmt::format("no spare waits and the round is at --nnodes' minimum ({})",
                        cfg_.rdzv.min_nodes);
    } else if (r.restart_count >= cfg_.rdzv.max_restarts) {  // the round it ends would end the job
      why = fmt::format("a replacement spends a restart, and none is left (--max_restarts {})",
                        cfg_.rdzv.max_restarts);
    } else {
      action = "replace";
    }
  }
  verdict["action"] = action;
  if (!why.empty()) verdict["not_replaced"] = why;
  spdlog::warn("straggler check: {} (--straggler_threshold {:g}){}", line, cfg_.straggler.threshold,
               action == "replace" ? ": it leaves the job, the round re-forms without it"
               : why.empty()       ? ""
                                   : fmt::format("; not replaced: {}", why));
  events_.record("straggler", verdict);
  rendezvous::Scope job = rendezvous::Scope::job();
  std::string topic = rendezvous::kStragglerTopic;
  std::string text = verdict.dump();
  try {
    co_await rdzv_->publish(std::move(job), std::move(topic), std::move(text));
  } catch (const std::exception& e) {
    spdlog::debug("straggler check: the verdict not shared: {}", e.what());
  }
  if (action != "replace") co_return;
  rendezvous::Scope round = rendezvous::Scope::of(r);
  std::string flag = straggler::kReplaceFlag;
  std::string reason = "the straggler check replaces a slow node: " + line;
  std::string detail = std::to_string(node_rank);
  co_await rdzv_->raise(std::move(round), std::move(flag), std::move(reason), std::move(detail));
}

std::optional<AgentOutcome> StragglerCheck::replaced_here(const rendezvous::Round& r) const {
  const std::optional<int> named = straggler::replaced(*rdzv_, r);
  if (!named || *named != r.node_rank) return std::nullopt;
  const std::optional<rendezvous::Flag> flag =
      rdzv_->raised(rendezvous::Scope::of(r), straggler::kReplaceFlag);
  AgentOutcome out;
  out.state = AgentOutcome::State::kUnhealthy;
  out.summary = "the straggler check found this node slow: " + (flag ? flag->reason : "");
  spdlog::error("straggler check: this node leaves the job: {}", flag ? flag->reason : "");
  events_.record("straggler_left", {{"round", r.number}, {"node_rank", r.node_rank}});
  return out;
}

}  // namespace ddprun::agent
