#include "checkpoint/round_restore.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "checkpoint/slot_copy.hpp"
#include "exchanges/checkpoint_agreement.hpp"
#include "workers/round_plan.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace asio = boost::asio;
using checkpoint_sources::Agreement;
using checkpoint_sources::Fetch;
using checkpoint_sources::NodeCheckpoints;
using checkpoint_sources::RestorePlan;

namespace {

fs::path restore_root(const RestoreParts& p) { return fs::path(p.regions.path()) / "restore"; }

// Whether local rank `local`'s region holds global rank `rank`'s slot of `step`, saved at `world`.
bool in_region(const CheckpointRegions& regions, int local, int rank, int world, int64_t step) {
  const std::optional<RegionHeader> h = regions.header(local);
  if (!h) return false;
  return std::any_of(std::begin(h->slots), std::end(h->slots), [&](const SlotRecord& s) {
    return s.state == SlotRecord::kCommitted && s.step == step && s.rank == rank &&
           s.world_size == static_cast<uint64_t>(world);
  });
}

// This node's local rank of each of its global ranks in the round.
std::map<int, int> locals_of(const RestoreParts& p, const rendezvous::Round& round) {
  std::map<int, int> out;
  for (const auto& [local, global] : round_ranks(p.cfg, round)) out[global] = local;
  return out;
}

std::string node_name(const NodeCheckpoints& n) {
  return fmt::format("node {} ({}:{})", n.node_rank, n.host, n.port);
}

// How long a node keeps asking for the slots whose fetch failed before its round gives up
// restoring from memory (every node then restores from --checkpoint_dir or starts afresh, and the
// steps in memory are dropped): a reset connection, a holder at its cap of connections or out of
// reach for seconds must not cost the job its progress. Between turns, a pause that doubles.
constexpr std::chrono::seconds kAskAgainFor{30};
constexpr std::chrono::milliseconds kFirstPause{250};
constexpr std::chrono::milliseconds kLongestPause{4000};

// How many steps a round tries in turn where a step's slots could not be fetched (the nodes keep
// the newest two steps of each slot).
constexpr int kPlansPerRound = 2;

// Gets step `step` of `wanted` (global rank, world size) from node `holder` into
// restore/step_<S>; the checkpoint_fetched event says how it went.
asio::awaitable<TransferReport> get_from(const RestoreParts& p, const rendezvous::Round& round,
                                         const Agreement& a, size_t holder,
                                         std::vector<std::pair<int, int>> wanted, int64_t step) {
  const NodeCheckpoints& h = a.nodes[holder];
  TransferReport r;
  std::vector<int> ranks;
  for (const auto& [rank, world] : wanted) ranks.push_back(rank);
  if (p.peers == nullptr) {
    r.detail = "this node cannot fetch copies";
    r.refused = true;
  } else {
    PeerAddress address{h.host, h.port};
    fs::path folder = restore_root(p);
    r = co_await p.peers->get(std::move(address), std::move(wanted), step, std::move(folder));
  }
  p.events.record("checkpoint_fetched", {{"round", round.number},
                                         {"step", step},
                                         {"from", fmt::format("{}:{}", h.host, h.port)},
                                         {"node", h.id},
                                         {"ranks", ranks},
                                         {"ok", r.ok},
                                         {"bytes", r.bytes},
                                         {"over_held_pages", r.over_held_pages},
                                         {"seconds", r.took.count()}});
  if (r.ok) {
    spdlog::info("round {}: got step {} of global rank(s) {} from {} ({} bytes in {:.3f} s{})",
                 round.number, step, fmt::join(ranks, ","), node_name(h), r.bytes, r.took.count(),
                 r.over_held_pages == 0
                     ? std::string()
                     : fmt::format(", {} of them into memory held beforehand", r.over_held_pages));
  }
  co_return r;
}

// Global rank `f.rank`'s slot of the plan's step, whose fetch from `f.holder` failed (`refused`:
// the holder said it cannot give it), asked of every other node holding it, then of the holder
// again, in turns until `deadline` (one for all the node's fetches: a holder out of reach costs
// the round at most that, plus the try under way) or the round's end. False (said) where none
// gave it.
asio::awaitable<bool> ask_again(const RestoreParts& p, const rendezvous::Round& round,
                                const Agreement& a, const Fetch& f, bool refused,
                                std::chrono::steady_clock::time_point deadline,
                                std::map<int, std::string>& from) {
  const int64_t step = *a.plan.step;
  std::vector<size_t> ask =
      checkpoint_sources::other_holders(a.nodes, a.plan, static_cast<size_t>(round.node_rank), f);
  if (!refused) ask.push_back(f.holder);  // the others first
  const auto started = std::chrono::steady_clock::now();
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::chrono::milliseconds pause = kFirstPause;
  int attempts = 1;
  std::string last;
  auto out_of_time = [&] {
    return std::chrono::steady_clock::now() >= deadline || p.rdzv->round_ended(round);
  };
  while (!ask.empty() && !out_of_time()) {
    for (auto it = ask.begin(); it != ask.end() && !out_of_time();) {
      // (Named arguments for co_await'ed calls here: g++ 12 destroys a temporary one twice.)
      std::vector<std::pair<int, int>> wanted{{f.rank, f.world}};
      const TransferReport r = co_await get_from(p, round, a, *it, std::move(wanted), step);
      ++attempts;
      if (r.ok) {
        from[f.rank] = node_name(a.nodes[*it]);
        co_return true;
      }
      last = fmt::format("{}: {}", node_name(a.nodes[*it]), r.detail);
      it = r.refused ? ask.erase(it) : it + 1;
    }
    if (ask.empty() || out_of_time()) break;
    timer.expires_after(
        std::min(pause, std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::max(deadline - std::chrono::steady_clock::now(),
                                     std::chrono::steady_clock::duration::zero()))));
    co_await timer.async_wait(asio::use_awaitable);
    pause = std::min(pause * 2, kLongestPause);
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
  spdlog::warn(
      "round {}: gave up on global rank {}'s step {} after {} attempt(s) over {:.1f} s{}{}",
      round.number, f.rank, step, attempts, took.count(),
      ask.empty() ? ": no node left to ask" : "",
      last.empty() ? "" : fmt::format(" (last: {})", last));
  co_return false;
}

// This node's fetches of the plan's step into restore/step_<S>, from itself or the nodes holding
// them; `from`: per global rank fetched, where it came from. A failed fetch from another node is
// asked again (ask_again). False (said) where one failed for good.
asio::awaitable<bool> fetch(const RestoreParts& p, const rendezvous::Round& round,
                            const Agreement& a, std::map<int, std::string>& from) {
  const RestorePlan& plan = a.plan;
  const auto me = static_cast<size_t>(round.node_rank);
  const int64_t step = *plan.step;
  const std::map<int, int> locals = locals_of(p, round);
  std::map<size_t, std::vector<std::pair<int, int>>> remote;
  for (const Fetch& f : plan.fetches[me]) {
    if (f.holder != me) {
      remote[f.holder].emplace_back(f.rank, f.world);
      continue;
    }
    const auto local = locals.find(f.rank);
    if (!plan.reshard && local != locals.end() &&
        in_region(p.regions, local->second, f.rank, f.world, step)) {
      from[f.rank] = "its own region";
      continue;
    }
    try {
      if (!p.sources.copy_to(f.rank, f.world, step, restore_root(p))) {
        spdlog::warn("round {}: global rank {}'s step {} is no longer on this node", round.number,
                     f.rank, step);
        co_return false;
      }
    } catch (const std::exception& e) {
      spdlog::warn("round {}: global rank {}'s step {} could not be copied on this node: {}",
                   round.number, f.rank, step, e.what());
      co_return false;
    }
    from[f.rank] = "this node";
  }
  std::optional<std::chrono::steady_clock::time_point> deadline;
  for (auto& [holder, wanted] : remote) {
    const TransferReport r = co_await get_from(p, round, a, holder, wanted, step);
    if (r.ok) {
      for (const auto& [rank, world] : wanted) from[rank] = node_name(a.nodes[holder]);
      continue;
    }
    if (!deadline) deadline = std::chrono::steady_clock::now() + kAskAgainFor;
    std::vector<int> ranks;
    for (size_t i = r.arrived; i < wanted.size(); ++i) ranks.push_back(wanted[i].first);
    spdlog::warn(
        "round {}: step {} of global rank(s) {} from {} did not arrive: {}; asking again, for up "
        "to {} s",
        round.number, step, fmt::join(ranks, ","), node_name(a.nodes[holder]), r.detail,
        kAskAgainFor.count());
    for (size_t i = 0; i < wanted.size(); ++i) {
      const auto& [rank, world] = wanted[i];
      if (i < r.arrived) {
        from[rank] = node_name(a.nodes[holder]);
        continue;
      }
      // The refusal is of the first rank that did not arrive; those after it were not asked.
      const bool refused = r.refused && i == r.arrived;
      const Fetch failed{holder, rank, world};
      if (!co_await ask_again(p, round, a, failed, refused, *deadline, from)) co_return false;
    }
  }
  co_return true;
}

// Each local rank whose region lacks its global rank's slot of the step gets the one fetched
// (its region made anew, holding that slot only: the file fetched itself where it can be, else a
// copy of it). False (said) where one could not be.
bool install(const RestoreParts& p, const rendezvous::Round& round, const RestorePlan& plan) {
  const std::atomic<bool> never{false};
  for (const auto& [local, global] : round_ranks(p.cfg, round)) {
    if (global >= plan.saved_world) continue;  // no counterpart in the world that saved it
    if (in_region(p.regions, local, global, plan.saved_world, *plan.step)) continue;
    try {
      if (!move_back(restore_root(p), *plan.step, global, p.regions.path(), local)) {
        read_back(restore_root(p), *plan.step, global, p.regions.path(), local, never);
      }
    } catch (const std::exception& e) {
      spdlog::error(
          "round {}: global rank {}'s step {} could not be put in local rank {}'s "
          "region: {}",
          round.number, global, *plan.step, local, e.what());
      return false;
    }
  }
  return true;
}

// The plan's step, in place on this node once every node's fetches arrived; nullopt where there
// is no step, or a node's fetches did not arrive (`unfetched` then set: nothing changed in any
// node's regions, and an older step may be planned), or a node could not put them in place.
// `attempt`: the how-manieth plan of the round this is (0: the first), which names its topics.
asio::awaitable<std::optional<CheckpointRestore>> from_memory(const RestoreParts& p,
                                                              const rendezvous::Round& round,
                                                              const Agreement& a, int attempt,
                                                              bool& unfetched,
                                                              nlohmann::json& account) {
  unfetched = false;
  const RestorePlan& plan = a.plan;
  if (!plan.step) co_return std::nullopt;
  const int64_t step = *plan.step;
  const auto wait = p.cfg.rdzv.join_timeout;
  CheckpointRestore restore{step, plan.saved_world, ""};
  nlohmann::json fields = {{"round", round.number},
                           {"step", step},
                           {"saved_world_size", plan.saved_world},
                           {"reshard", plan.reshard}};
  if (plan.saved_world != round.world_size && !plan.reshard) {
    spdlog::warn(
        "round {}: step {} was saved by a job of {} ranks and this round has {}, with "
        "checkpoint.save (one rank's state, which cannot be resharded): each rank below {} "
        "restores what that rank saved{}",
        round.number, step, plan.saved_world, round.world_size, plan.saved_world,
        round.world_size > plan.saved_world
            ? "; the others have no counterpart (load() raises, or starts them afresh "
              "where the script asks)"
            : "");
  }
  std::map<int, std::string> from;
  const bool fetched = co_await fetch(p, round, a, from);
  const std::string suffix = attempt == 0 ? "" : fmt::format(".{}", step);
  std::string topic = "checkpoint_restored" + suffix;
  if (!co_await checkpoint_sources::all_did(p.rdzv, round, topic, fetched, wait)) {
    spdlog::warn("round {}: not every node got its slots of step {}: step {} is not restored",
                 round.number, step, step);
    unfetched = true;
    co_return std::nullopt;
  }
  if (plan.reshard) {
    restore.reshard_dir = (restore_root(p) / fmt::format("step_{}", step)).string();
  } else {
    std::string installed = "checkpoint_installed" + suffix;
    const bool mine = install(p, round, plan);
    if (!co_await checkpoint_sources::all_did(p.rdzv, round, installed, mine, wait)) {
      spdlog::warn(
          "round {}: not every node put its slots of step {} in place: not restored "
          "from memory",
          round.number, step);
      co_return std::nullopt;
    }
  }
  if (p.peers != nullptr) {  // the copies of nodes that left are no longer needed
    std::vector<std::string> members;
    for (const auto& n : a.nodes) members.push_back(n.id);
    p.peers->keep_only(members);
  }
  std::vector<std::string> moved;
  nlohmann::json ranks = nlohmann::json::array();
  std::set<std::string> peers;
  for (const auto& [rank, where] : from) {
    ranks.push_back({{"rank", rank}, {"from", where}});
    if (where != "its own region") moved.push_back(fmt::format("rank {} from {}", rank, where));
    if (where.rfind("node ", 0) == 0) peers.insert(where);
  }
  spdlog::info(
      "round {}: the workers restore the in-memory checkpoint of step {}{}{}", round.number, step,
      plan.reshard
          ? fmt::format(", resharded from {} ranks to {}", plan.saved_world, round.world_size)
          : "",
      moved.empty() ? "" : fmt::format(" ({})", fmt::join(moved, "; ")));
  fields["from"] = peers.empty() ? "memory" : "peer";
  fields["ranks"] = std::move(ranks);
  if (!peers.empty()) fields["peers"] = peers;
  account = fields;
  p.events.record("checkpoint_restore", std::move(fields));
  co_return restore;
}

// The newest step complete in --checkpoint_dir for every rank of the round, as the round's nodes
// agree (one exchange: once a round); none of `two_states` (steps the memory plan found saved with
// two states: a rank's file of one may be of either save).
asio::awaitable<std::optional<int64_t>> newest_on_disk(
    const RestoreParts& p, const rendezvous::Round& round,
    const std::vector<RestorePlan::SavedTwice>& two_states) {
  std::vector<std::vector<int64_t>> held;
  const std::vector<std::pair<int, int>> ranks = round_ranks(p.cfg, round);
  for (const auto& [local, global] : ranks) {
    held.push_back(p.persister->steps_on_disk(global, static_cast<uint64_t>(round.world_size)));
    std::erase_if(held.back(), [&](int64_t s) {
      return std::any_of(two_states.begin(), two_states.end(),
                         [s](const RestorePlan::SavedTwice& t) { return t.step == s; });
    });
  }
  co_return co_await checkpoint_agreement::agree(p.rdzv, round, held, p.cfg.rdzv.join_timeout);
}

// Step `step` of --checkpoint_dir (newest_on_disk) copied back into the regions; nullopt where
// there is none or it could not be.
asio::awaitable<std::optional<CheckpointRestore>> from_disk(const RestoreParts& p,
                                                            const rendezvous::Round& round,
                                                            std::optional<int64_t> step,
                                                            nlohmann::json& account) {
  if (!step) co_return std::nullopt;
  const std::vector<std::pair<int, int>> ranks = round_ranks(p.cfg, round);
  if (!co_await p.persister->restore(*step, ranks)) {
    spdlog::error("round {}: step {} could not be read back from {}: the workers start afresh",
                  round.number, *step, p.cfg.checkpoint_dir);
    co_return std::nullopt;
  }
  spdlog::info("round {}: the workers restore step {} from {}", round.number, *step,
               p.cfg.checkpoint_dir);
  account = {{"round", round.number},
             {"step", *step},
             {"saved_world_size", round.world_size},
             {"from", p.cfg.checkpoint_dir}};
  p.events.record("checkpoint_restore", account);
  co_return CheckpointRestore{*step, round.world_size, ""};
}

}  // namespace

asio::awaitable<RoundRestore> restore_round(const RestoreParts& p, const rendezvous::Round& round) {
  std::error_code ignored;
  fs::remove_all(restore_root(p), ignored);  // what an earlier round gathered
  RoundRestore out;
  NodeCheckpoints mine;
  mine.id = p.node_id;
  mine.node_rank = round.node_rank;
  mine.base_rank = round.base_rank;
  mine.nproc = p.cfg.rdzv.nproc;
  mine.held = p.sources.held();
  mine.timeline = p.sources.timeline();
  if (p.peers != nullptr) {
    mine.host = p.peer_host;
    mine.port = p.peers->port();
  }
  const std::optional<Agreement> agreed =
      co_await checkpoint_sources::agree(p.rdzv, round, mine, p.cfg.rdzv.join_timeout);
  const std::vector<RestorePlan::SavedTwice> two_states =
      agreed ? agreed->plan.twice : std::vector<RestorePlan::SavedTwice>{};
  // The newest step in --checkpoint_dir, once the round's nodes agreed on it (at most once).
  std::optional<std::optional<int64_t>> on_disk;
  if (agreed) {
    out.nodes = agreed->nodes;
    const auto& behind = agreed->plan.behind;
    if (std::find(behind.begin(), behind.end(), static_cast<size_t>(round.node_rank)) !=
        behind.end()) {
      if (!mine.held.empty()) {
        spdlog::warn(
            "round {}: another node restored a checkpoint in a round after {} while this node was "
            "out of the job: the {} slot(s) this node holds may be of the timeline that restore "
            "abandoned, and are dropped",
            round.number, mine.timeline, mine.held.size());
        p.events.record(
            "checkpoint_slots_behind",
            {{"round", round.number}, {"timeline", mine.timeline}, {"slots", mine.held.size()}});
      }
      // It joins the newest timeline, not this round's: this round's restore may yet fail
      // everywhere, and the others' slots must not look behind this node's in the next.
      int newest = mine.timeline;
      for (const NodeCheckpoints& n : agreed->nodes) newest = std::max(newest, n.timeline);
      p.sources.drop_after(std::nullopt, newest);
    }
    for (const RestorePlan::SavedTwice& t : agreed->plan.twice) {
      spdlog::warn(
          "round {}: step {} was saved with two states (global rank {}'s two saves are held): "
          "one step number names two states, and no rank restores it{}. A loop that resumes "
          "from load()'s step S saves its next state as step S+1",
          round.number, t.step, t.rank,
          agreed->plan.step ? fmt::format(" (step {} is restored)", *agreed->plan.step) : "");
      p.events.record("checkpoint_step_saved_twice",
                      {{"round", round.number}, {"step", t.step}, {"rank", t.rank}});
    }
    // A step some node could not gather gives way to the newest older one every rank has (the
    // nodes keep the newest two of each slot; nothing changed in any region yet), unless
    // --checkpoint_dir holds a step at least as new.
    Agreement attempt = *agreed;
    for (int n = 0; attempt.plan.step; ++n) {
      bool unfetched = false;
      out.restore = co_await from_memory(p, round, attempt, n, unfetched, out.account);
      if (out.restore || !unfetched || n + 1 == kPlansPerRound || p.rdzv->round_ended(round)) {
        break;
      }
      const int64_t failed = *attempt.plan.step;
      fs::remove_all(restore_root(p) / fmt::format("step_{}", failed), ignored);
      attempt.plan = checkpoint_sources::plan_restore(attempt.nodes, round.world_size, failed);
      if (!attempt.plan.step) break;
      if (p.persister != nullptr) {
        on_disk = co_await newest_on_disk(p, round, two_states);
        if (*on_disk && **on_disk >= *attempt.plan.step) break;
      }
      spdlog::warn(
          "round {}: step {} could not be gathered on every node: trying step {}, the newest "
          "older step every rank has in memory",
          round.number, failed, *attempt.plan.step);
      p.events.record("checkpoint_step_unfetched",
                      {{"round", round.number}, {"step", failed}, {"trying", *attempt.plan.step}});
    }
    const auto& lost = agreed->plan.ranks_without_copy;
    if (!out.restore && !lost.empty() && static_cast<int>(lost.size()) < round.world_size) {
      spdlog::warn(
          "round {}: no in-memory slot of global rank{} {} is left (its node and the node holding "
          "its copies are gone, or a node joined with none): {}",
          round.number, lost.size() > 1 ? "s" : "", fmt::join(lost, ","),
          p.persister != nullptr ? "restoring from --checkpoint_dir"
                                 : "with no --checkpoint_dir, the workers start afresh");
      p.events.record("checkpoint_copies_lost", {{"round", round.number}, {"ranks", lost}});
    }
    const auto& newest = agreed->plan.newest_by_rank;
    if (!out.restore && !agreed->plan.step && !newest.empty()) {
      constexpr size_t kNamed = 8;  // ranks named in the line; the rest counted
      std::vector<std::string> each;
      for (size_t rank = 0; rank < std::min(newest.size(), kNamed); ++rank) {
        each.push_back(fmt::format("rank {} step {}", rank, newest[rank]));
      }
      if (newest.size() > kNamed) each.push_back(fmt::format("{} more", newest.size() - kNamed));
      const auto [oldest, latest] = std::minmax_element(newest.begin(), newest.end());
      spdlog::warn(
          "round {}: memory holds slots of every global rank but of no one step that every rank "
          "has (the newest of each: {}): {}",
          round.number, fmt::join(each, ", "),
          p.persister != nullptr ? "restoring from --checkpoint_dir"
                                 : "with no --checkpoint_dir, the workers start afresh");
      p.events.record("checkpoint_no_common_step",
                      {{"round", round.number}, {"oldest", *oldest}, {"newest", *latest}});
    }
  }
  if (!out.restore && p.persister != nullptr) {
    if (!on_disk) on_disk = co_await newest_on_disk(p, round, two_states);
    out.restore = co_await from_disk(p, round, *on_disk, out.account);
  }
  const std::optional<int64_t> step =
      out.restore ? std::optional<int64_t>(out.restore->step) : std::nullopt;
  const checkpoint_sources::Outcome outcome =
      round.num_nodes > 1
          ? co_await checkpoint_sources::same_outcome(p.rdzv, round, step, p.cfg.rdzv.join_timeout)
          : checkpoint_sources::Outcome::kSame;
  if (outcome != checkpoint_sources::Outcome::kSame) {
    out.restore.reset();
    out.outcome = outcome;
    co_return out;
  }
  p.sources.drop_after(step, round.number);
  if (p.persister != nullptr) {
    // What the disk holds beyond the step restored (or at all, where none was: an incomplete step
    // the new timeline would complete with its own files) is of a timeline the job left.
    std::vector<int> ranks;
    for (const auto& [local, global] : round_ranks(p.cfg, round)) ranks.push_back(global);
    p.persister->abandon_after(
        step.value_or(-1),
        static_cast<uint64_t>(step ? out.restore->saved_world : round.world_size), ranks);
  }
  co_return out;
}

}  // namespace ddprun::agent
