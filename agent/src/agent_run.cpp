#include "agent_run.hpp"

#include <algorithm>
#include <csignal>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/this_coro.hpp>

#include "admission.hpp"
#include "exchanges/crash_loop.hpp"
#include "exchanges/failure_reports.hpp"
#include "exchanges/hang_exchange.hpp"
#include "exchanges/role_ranks.hpp"
#include "exchanges/stop_exchange.hpp"
#include "logs/round_report.hpp"
#include "outcome.hpp"
#include "watchers/hang_summary.hpp"
#include "workers/round_plan.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

struct Run : AgentParts {
  explicit Run(const AgentParts& parts)
      : AgentParts(parts),
        admission(std::make_shared<NodeAdmission>(parts.io, parts.cfg, parts.run_dir, parts.rdzv,
                                                  parts.events, parts.containment, parts.nvml)),
        outcomes(parts.cfg, parts.run_dir, parts.rdzv, parts.events),
        report([&stop = parts.stop](asio::awaitable<void> task) { stop.spawn(std::move(task)); },
               parts.cfg, parts.rdzv, parts.events) {}

  // The checks that keep this node out; shared with a measurement of the links the straggler check
  // runs (which may still be ending, cancelled, after the job's last round).
  std::shared_ptr<NodeAdmission> admission;
  RunOutcomes outcomes;  // what the end of a round, or of the job, means here

  RoundReport report;  // rounds formed, restarts measured

  bool checked_for_next_round = false;  // the health check ran just before joining

  // Runs one round of the local group while the rendezvous watches for a reason to end it from
  // outside (another node failed, left or joined); such a reason stops the workers. Returns the
  // group's result and that reason, if one came first. The watcher, bound to the job (JobStop::
  // spawn), may outlive this call: what it shares lives on the heap, and it keeps the rendezvous
  // alive.
  //
  // Arguments are references to the caller's named objects, never temporaries: g++ 12 destroyed a
  // temporary argument of a co_await'ed call twice (a shared_ptr released twice: use-after-free).
  asio::awaitable<std::pair<GroupResult, std::string>> run_watched(
      std::vector<WorkerLaunch>& launches, const rendezvous::Round& round) {
    struct Watch {
      bool group_done = false;
      std::string why;
    };
    auto watch = std::make_shared<Watch>();
    stop.spawn([watch, rdzv = rdzv, round, &group = group, &events = events,
                &stop = stop]() mutable -> asio::awaitable<void> {
      std::string why;
      try {
        why = co_await rdzv->interruption(round);
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (const int s = stop_exchange::peer_signal(*rdzv); s != 0) {
        // The job is being stopped by a signal that reached another node first: this node's
        // workers get the same signal (unless a stop is already under way here).
        if (!watch->group_done) stop.follow_peer(s, why);
        co_return;
      }
      if (!watch->group_done && !why.empty()) {
        spdlog::warn("stopping this node's workers: {}", why);
        events.record("workers_interrupted", {{"reason", why}});
        watch->why = why;
        if (hang_exchange::peer_hang(*rdzv, round)) {
          group.interrupt_for_stacks();
        } else {
          group.interrupt();
        }
      }
    });
    HangCoordinator hangs;
    if (round.num_nodes > 1) {
      hangs.announce = [this, round](std::function<void()> then) {
        stop.spawn([rdzv = rdzv, round, then]() -> asio::awaitable<void> {
          co_await hang_exchange::announce(rdzv, round);
          then();
        });
      };
      hangs.frozen = [this, round](std::function<void()> then) {
        stop.spawn([rdzv = rdzv, round, then]() -> asio::awaitable<void> {
          co_await hang_exchange::frozen(rdzv, round, std::chrono::seconds(3));
          then();
        });
      };
    }
    group.coordinate_hangs_with(hangs);
    group.on_stopping([&checkpoints = checkpoints] { checkpoints.workers_stopping(); });
    group.on_failure_in_process([this, round] {
      if (round.num_nodes == 1) return;
      stop.spawn([rdzv = rdzv, round]() -> asio::awaitable<void> {
        co_await failure_reports::announce(rdzv, round);
      });
    });
    GroupResult r = co_await group.run(std::move(launches));
    watch->group_done = true;
    rdzv->stop_waiting();
    co_return std::pair{std::move(r), watch->why};
  }

  asio::awaitable<AgentOutcome> run() {
    std::exception_ptr error;
    AgentOutcome out;
    bool joined = false;
    group.on_first_progress(
        [this](const AttemptTimes& times) { report.attempt_progressed(times); });
    try {
      if (std::optional<AgentOutcome> sick = co_await admission->unhealthy()) {
        out = std::move(*sick);
      } else {
        checked_for_next_round = true;
        joined = true;
        co_await rdzv->join();
        co_await checkpoints.joined();
        out = co_await rounds();
      }
    } catch (...) {
      error = std::current_exception();
    }
    // The signal ended a wait (cancelled it, or left the rendezvous).
    if (error && stop.stopping()) {
      co_await asio::this_coro::reset_cancellation_state();  // what follows is the way out
      error = nullptr;
      out = stopped_by_signal();
    }
    group.on_first_progress(nullptr);
    // Workers kept for an in-process restart that will not come go with the job (SIGKILLed with
    // the group, should a stop cancel this wait).
    try {
      co_await group.end_kept(stop.stopping() ? stop.signo() : SIGTERM);
    } catch (const boost::system::system_error&) {
    }
    if (joined) co_await rdzv->leave(!error && out.state != AgentOutcome::State::kSignaled);
    if (error) std::rethrow_exception(error);
    co_return out;
  }

  // The one round loop, whatever the backend.
  asio::awaitable<AgentOutcome> rounds() {
    std::string interrupted_by;  // why the last round was stopped from outside, if it was
    std::optional<WorkerFailure> own_failure;  // this node's first failed worker, last round
    for (;;) {
      if (stop.stopping()) co_return stopped_by_signal();
      if (!std::exchange(checked_for_next_round, false)) {
        if (std::optional<AgentOutcome> sick = co_await admission->unhealthy())
          co_return std::move(*sick);
      }
      const std::optional<rendezvous::Round> round = co_await rdzv->next_round();
      const int peer = round ? 0 : stop_exchange::peer_signal(*rdzv);
      if (peer != 0) {  // stopped with a peer, by its signal
        stop.adopt(peer);
        co_return stopped_by_signal();
      }
      if (!round) co_return co_await job_over(interrupted_by, own_failure);
      own_failure.reset();
      report.formed(*round);
      checkpoints.round_formed();
      const std::optional<rendezvous::WorkerStoreAddress> master =
          co_await rdzv->worker_store(*round);
      if (!master) {  // the round ended before its store was known: no worker starts in it
        const std::string why = co_await rdzv->interruption(*round);
        spdlog::warn("round {} ended before its workers started: {}", round->number, why);
        events.record("round_ended_before_start", {{"round", round->number}, {"reason", why}});
        interrupted_by = why;
        co_await rdzv->end_round(*round, false);
        continue;
      }
      // Stopped while the round formed: none of its workers starts.
      if (stop.stopping()) co_return stopped_by_signal();
      AgentOutcome kept_out;
      const NodeAdmission::Checked checked =
          co_await admission->check_nodes(*round, *master, kept_out);
      if (checked == NodeAdmission::Checked::kThisNodeOut) co_return kept_out;
      if (checked == NodeAdmission::Checked::kAnotherNodeOut) {  // the round re-forms without them
        interrupted_by = co_await rdzv->interruption(*round);
        co_await rdzv->end_round(*round, false);
        continue;
      }
      const fs::path attempt_dir = run_dir / fmt::format("attempt_{}", round->restart_count);
      fs::remove_all(attempt_dir);
      std::optional<CheckpointRestore> restore;
      bool disagreed = false, round_ended = false;  // (no co_await in a handler)
      try {
        restore = co_await checkpoints.restore_for(*round);
      } catch (const RestoreDisagreed& e) {
        disagreed = true;
        round_ended = e.round_ended();
        interrupted_by = e.what();
      }
      if (disagreed) {  // no worker starts: the round ends on every node, spending a restart
        co_await rdzv->end_round(*round, !round_ended);  // (unless a node left: a new membership)
        continue;
      }
      if (!restore) {  // (in process: the kept workers' state is not a new process's)
        const std::vector<int> ended = co_await group.start_afresh();
        if (!ended.empty()) co_await admission->gpu_memory_released(ended);
      }
      GroupResult r = co_await run_round(*round, *master, attempt_dir, restore, interrupted_by);
      if (std::optional<AgentOutcome> ended =
              co_await after_round(*round, r, attempt_dir, restore, own_failure)) {
        co_return std::move(*ended);
      }
    }
  }

  // The job stopped by a signal: this node's, or a peer's forwarded to it.
  AgentOutcome stopped_by_signal() const {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    out.state = AgentOutcome::State::kSignaled;
    out.signal = stop.signo();
    return out;
  }

  // The rendezvous has no next round: a crash loop announced, or the job's end.
  asio::awaitable<AgentOutcome> job_over(const std::string& interrupted_by,
                                         const std::optional<WorkerFailure>& own_failure) {
    if (const auto loop = crash_loop::announced(*rdzv)) co_return outcomes.crash_loop(*loop, {});
    AgentOutcome ended = co_await outcomes.job_ended(interrupted_by);
    if (ended.state == AgentOutcome::State::kFailed) ended.own_failure = own_failure;
    co_return ended;
  }

  // Starts `round`'s workers (from `restore` where there is one) and runs them to the round's
  // end, with the checkpoints and the straggler check told of its start and end; `interrupted_by`
  // becomes the reason from outside that ended it, if one did.
  asio::awaitable<GroupResult> run_round(const rendezvous::Round& round,
                                         const rendezvous::WorkerStoreAddress& store,
                                         const fs::path& attempt_dir,
                                         const std::optional<CheckpointRestore>& restore,
                                         std::string& interrupted_by) {
    const RoleRanks roles = co_await role_ranks_of(round);
    std::vector<WorkerLaunch> launches =
        plan_round(cfg, attempt_dir, round, store, bindings, restore, roles);
    checkpoints.round_started(round);
    straggler.round_started(round, [admission = admission, ran = round, store](int pass) {
      return admission->measure_again(ran, store, pass);
    });
    auto [r, why] = co_await run_watched(launches, round);
    straggler.round_ended();
    if (!why.empty()) interrupted_by = why;
    report.attempt_progressed(r.times);  // its workers ended before any progress
    checkpoints.round_ended(round, r.state == GroupResult::State::kFailed && !r.failures.empty());
    co_return std::move(r);
  }

  // What the end of `round` (its result `r`) means: the job's outcome where the job ends here
  // (done, failed, this node replaced, a crash loop), else nothing and the restart it starts is
  // timed from its cause. A hang leaves its stacks in the attempt's folder; `own_failure` becomes
  // this node's first failed worker.
  asio::awaitable<std::optional<AgentOutcome>> after_round(
      const rendezvous::Round& round, GroupResult& r, const fs::path& attempt_dir,
      const std::optional<CheckpointRestore>& restore, std::optional<WorkerFailure>& own_failure) {
    if (!r.stacks.empty()) {
      const fs::path stacks = attempt_dir / "hang_stacks.log";
      std::ofstream(stacks) << r.stacks;
      spdlog::error("hang: every rank's stack is in {}", stacks.string());
    }
    if (r.hang || hang_exchange::peer_hang(*rdzv, round))
      co_await summarise_hang(rdzv, round, cfg.shutdown_timeout, r);
    if (r.state == GroupResult::State::kFailed || r.state == GroupResult::State::kInterrupted) {
      co_await admission->gpu_memory_released(r.pids);
    }
    if (r.state == GroupResult::State::kFailed && !r.failures.empty()) {
      own_failure = *std::min_element(r.failures.begin(), r.failures.end(), failed_earlier);
    }
    // (Not where this node's workers had finished: a job done is not undone by a late verdict.)
    if (std::optional<AgentOutcome> slow = r.state == GroupResult::State::kSucceeded
                                               ? std::nullopt
                                               : straggler.replaced_here(round)) {
      slow->run_log_dir = run_dir.string();
      co_return slow;
    }
    if (std::optional<AgentOutcome> ended = co_await outcomes.settle(r, round)) co_return ended;
    const std::optional<int64_t> resumed = restore ? std::optional(restore->step) : std::nullopt;
    if (std::optional<AgentOutcome> loop = co_await outcomes.crash_looping(round, resumed)) {
      loop->own_failure = own_failure;
      co_return loop;
    }
    std::string cause = "interrupted";
    if (r.hang || hang_exchange::peer_hang(*rdzv, round)) {
      cause = "hang";
    } else if (r.state == GroupResult::State::kFailed) {
      cause = "failure";
    }
    report.attempt_ended(r.times, std::move(cause));
    co_return std::nullopt;
  }

  // Where this node's workers stand among those of their role (exchanges/role_ranks.hpp); with
  // one node, the global ranks.
  asio::awaitable<RoleRanks> role_ranks_of(const rendezvous::Round& round) {
    if (round.num_nodes < 2) co_return RoleRanks{round.base_rank, round.world_size};
    const std::optional<role_ranks::RolePlace> place =
        co_await role_ranks::agree(rdzv, round, cfg.role, cfg.rdzv.nproc, cfg.rdzv.join_timeout);
    if (!place) {
      spdlog::warn(
          "round {}: the nodes' roles did not all arrive: ROLE_RANK and ROLE_WORLD_SIZE "
          "are the global ranks",
          round.number);
      co_return RoleRanks{round.base_rank, round.world_size};
    }
    co_return RoleRanks{place->base, place->world};
  }
};

}  // namespace

asio::awaitable<AgentOutcome> run_job(const AgentParts& parts) {
  Run run(parts);
  AgentOutcome out = co_await run.run();
  if (out.state != AgentOutcome::State::kSignaled) co_await parts.checkpoints.job_ended();
  co_return out;
}

}  // namespace ddprun::agent
