#include "agent_run.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "admission.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/store/local_address.hpp"
#include "exchanges/crash_loop.hpp"
#include "exchanges/hang_exchange.hpp"
#include "exchanges/role_ranks.hpp"
#include "exchanges/stop_exchange.hpp"
#include "outcome.hpp"
#include "watchers/hang_summary.hpp"
#include "workers/restart_phases.hpp"
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
        outcomes(parts.cfg, parts.run_dir, parts.rdzv, parts.events) {}

  // The checks that keep this node out; shared with a measurement of the links the straggler check
  // runs (which may still be ending, cancelled, after the job's last round).
  std::shared_ptr<NodeAdmission> admission;
  RunOutcomes outcomes;  // what the end of a round, or of the job, means here

  bool checked_for_next_round = false;  // the health check ran just before joining
  RestartClock restart_clock;           // the restart under way, phase by phase

  // Runs one round of the local group while the rendezvous watches for a reason to end it from
  // outside (another node failed, left or joined); such a reason stops the workers. Returns the
  // group's result and that reason, if one came first. The watcher may outlive this call: what it
  // shares lives on the heap, and it keeps the rendezvous alive.
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
    asio::co_spawn(
        io,
        [watch, rdzv = rdzv, round, &group = group, &events = events, &signaled = signaled,
         &peer_stopped = peer_stopped]() mutable -> asio::awaitable<void> {
          std::string why;
          try {
            why = co_await rdzv->interruption(round);
          } catch (const std::exception& e) {
            why = e.what();
          }
          if (const int s = stop_exchange::peer_signal(*rdzv); s != 0) {
            // The job is being stopped by a signal that reached another node first: this node's
            // workers get the same signal, as if it had reached this agent (unless it already
            // has: then they are stopping with it).
            if (signaled == 0 && !watch->group_done) {
              spdlog::warn("{}: forwarding {} to the workers and shutting down", why,
                           signal_name(s));
              events.record("signal", {{"signal", signal_name(s)}, {"from", why}});
              signaled = s;
              peer_stopped = true;
              group.stop(s);
            }
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
        },
        asio::detached);
    HangCoordinator hangs;
    if (round.num_nodes > 1) {
      hangs.announce = [this, round](std::function<void()> then) {
        asio::co_spawn(
            io,
            [rdzv = rdzv, round, then]() -> asio::awaitable<void> {
              co_await hang_exchange::announce(rdzv, round);
              then();
            },
            asio::detached);
      };
      hangs.frozen = [this, round](std::function<void()> then) {
        asio::co_spawn(
            io,
            [rdzv = rdzv, round, then]() -> asio::awaitable<void> {
              co_await hang_exchange::frozen(rdzv, round, std::chrono::seconds(3));
              then();
            },
            asio::detached);
      };
    }
    group.coordinate_hangs_with(hangs);
    GroupResult r = co_await group.run(std::move(launches));
    watch->group_done = true;
    rdzv->stop_waiting();
    co_return std::pair{std::move(r), watch->why};
  }

  asio::awaitable<AgentOutcome> run() {
    std::exception_ptr error;
    AgentOutcome out;
    bool joined = false;
    group.on_first_progress([this](const AttemptTimes& times) { restart_measured(times); });
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
    if (error && signaled != 0) {  // the signal ended a wait (cancelled it, or left the rendezvous)
      co_await asio::this_coro::reset_cancellation_state();  // what follows is the way out
      error = nullptr;
      out.run_log_dir = run_dir.string();
      out.state = AgentOutcome::State::kSignaled;
      out.signal = signaled;
    }
    group.on_first_progress(nullptr);
    // Workers kept for an in-process restart that will not come go with the job (SIGKILLed with
    // the group, should a stop cancel this wait).
    try {
      co_await group.end_kept(signaled != 0 ? signaled : SIGTERM);
    } catch (const boost::system::system_error&) {
    }
    if (joined) co_await rdzv->leave(!error && out.state != AgentOutcome::State::kSignaled);
    if (error) std::rethrow_exception(error);
    co_return out;
  }

  // The restart under way reached its new attempt's first progress (or that attempt ended
  // without any): its phases go to the log, the event log (and so the metrics) and `ddprun
  // status`.
  void restart_measured(const AttemptTimes& times) {
    const std::optional<RestartPhases> p = restart_clock.complete(times);
    if (!p) return;
    spdlog::info(
        "the restart into round {} took {:.3f} s: {:.3f} s to detect the {}, {:.3f} s to stop the "
        "workers, {:.3f} s to form the round, {:.3f} s to start the workers, {}",
        p->round, p->total(), p->detection, p->cause == "interrupted" ? "interruption" : p->cause,
        p->stopping, p->rendezvous, p->starting,
        p->first_progress ? fmt::format("{:.3f} s to their first progress", *p->first_progress)
                          : std::string("and they made no progress"));
    nlohmann::json phases = p->to_json();
    events.record("restart_phases", phases);
    asio::co_spawn(
        io,
        [rdzv = rdzv, text = phases.dump()]() mutable -> asio::awaitable<void> {
          rendezvous::Scope scope = rendezvous::Scope::job();
          std::string topic = rendezvous::kRestartTopic;
          try {
            co_await rdzv->publish(std::move(scope), std::move(topic), std::move(text));
          } catch (const std::exception&) {
            // The store is gone or the job ended: nobody to show it to.
          }
        },
        asio::detached);
  }

  // The one round loop, whatever the backend.
  asio::awaitable<AgentOutcome> rounds() {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    std::string interrupted_by;  // why the last round was stopped from outside, if it was
    int last_restart_count = 0;
    std::optional<int> own_failure;  // this node's first failed worker's exit code, last round
    for (;;) {
      if (signaled != 0) {
        out.state = AgentOutcome::State::kSignaled;
        out.signal = signaled;
        co_return out;
      }
      if (!std::exchange(checked_for_next_round, false)) {
        if (std::optional<AgentOutcome> sick = co_await admission->unhealthy())
          co_return std::move(*sick);
      }
      const std::optional<rendezvous::Round> round = co_await rdzv->next_round();
      const int peer = round ? 0 : stop_exchange::peer_signal(*rdzv);
      if (peer != 0) {  // stopped with a peer, by its signal
        if (signaled == 0) signaled = peer;
        out.state = AgentOutcome::State::kSignaled;
        out.signal = signaled;
        co_return out;
      }
      if (!round) {
        if (const auto loop = crash_loop::announced(*rdzv))
          co_return outcomes.crash_loop(*loop, {});
        AgentOutcome ended = co_await outcomes.job_ended(interrupted_by);
        if (ended.state == AgentOutcome::State::kFailed) ended.own_worker_exitcode = own_failure;
        co_return ended;
      }
      own_failure.reset();
      restart_clock.round_formed(std::chrono::steady_clock::now(), round->number,
                                 round->restart_count);
      record_round(*round, last_restart_count);
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
      if (signaled != 0) {  // stopped while the round formed: none of its workers starts
        out.state = AgentOutcome::State::kSignaled;
        out.signal = signaled;
        co_return out;
      }
      AgentOutcome kept_out;
      const rendezvous::WorkerStoreAddress& store = *master;
      const NodeAdmission::Checked checked =
          co_await admission->check_nodes(*round, store, kept_out);
      if (checked == NodeAdmission::Checked::kThisNodeOut) co_return kept_out;
      if (checked == NodeAdmission::Checked::kAnotherNodeOut) {  // the round re-forms without them
        interrupted_by = co_await rdzv->interruption(*round);
        co_await rdzv->end_round(*round, false);
        continue;
      }
      const fs::path attempt_dir = run_dir / fmt::format("attempt_{}", round->restart_count);
      fs::remove_all(attempt_dir);
      const std::optional<CheckpointRestore> restore = co_await checkpoints.restore_for(*round);
      const RoleRanks roles = co_await role_ranks_of(*round);
      std::vector<WorkerLaunch> launches =
          plan_round(cfg, attempt_dir, *round, *master, bindings, restore, roles);
      checkpoints.round_started(*round);
      straggler.round_started(*round, [admission = admission, ran = *round, store](int pass) {
        return admission->measure_again(ran, store, pass);
      });
      auto [r, why] = co_await run_watched(launches, *round);
      straggler.round_ended();
      if (!why.empty()) interrupted_by = why;
      restart_measured(r.times);  // its workers ended before any progress
      checkpoints.round_ended(*round,
                              r.state == GroupResult::State::kFailed && !r.failures.empty());
      if (!r.stacks.empty()) {
        const fs::path stacks = attempt_dir / "hang_stacks.log";
        std::ofstream(stacks) << r.stacks;
        spdlog::error("hang: every rank's stack is in {}", stacks.string());
      }
      if (r.hang || hang_exchange::peer_hang(*rdzv, *round))
        co_await summarise_hang(rdzv, *round, cfg.shutdown_timeout, r);
      if (r.state == GroupResult::State::kFailed || r.state == GroupResult::State::kInterrupted) {
        co_await admission->gpu_memory_released(r.pids);
      }
      if (r.state == GroupResult::State::kFailed && !r.failures.empty()) {
        own_failure = r.failures.front().exitcode;
      }
      if (std::optional<AgentOutcome> slow = straggler.replaced_here(*round)) {
        slow->run_log_dir = run_dir.string();
        co_return std::move(*slow);
      }
      const rendezvous::Round& ran = *round;
      if (std::optional<AgentOutcome> ended = co_await outcomes.settle(r, ran)) {
        co_return std::move(*ended);
      }
      const std::optional<int64_t> resumed = restore ? std::optional(restore->step) : std::nullopt;
      if (std::optional<AgentOutcome> loop = co_await outcomes.crash_looping(ran, resumed)) {
        co_return std::move(*loop);
      }
      std::string cause = "interrupted";
      if (r.hang || hang_exchange::peer_hang(*rdzv, ran)) {
        cause = "hang";
      } else if (r.state == GroupResult::State::kFailed) {
        cause = "failure";
      }
      restart_clock.attempt_ended(r.times, std::move(cause));
    }
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

  // Says (in the log and the event log) that `round` formed, and that it is a restart if it is.
  void record_round(const rendezvous::Round& round, int& last_restart_count) {
    if (round.restart_count > last_restart_count) {
      spdlog::warn("restarting the workers (restart {} of at most {})", round.restart_count,
                   cfg.rdzv.max_restarts);
      events.record("restart", {{"restart_count", round.restart_count},
                                {"max_restarts", cfg.rdzv.max_restarts}});
      last_restart_count = round.restart_count;
    }
    nlohmann::json formed = {{"round", round.number},        {"restart_count", round.restart_count},
                             {"node_rank", round.node_rank}, {"num_nodes", round.num_nodes},
                             {"base_rank", round.base_rank}, {"world_size", round.world_size},
                             {"members", round.members}};
    if (const std::optional<rendezvous::ClockOffset> clock = rdzv->clock_offset()) {
      // The store's clock minus this node's, for `ddprun timeline` (ms, µs precision).
      formed["clock_offset_ms"] = static_cast<double>(clock->offset_micros) / 1000.0;
      formed["clock_round_trip_ms"] = static_cast<double>(clock->round_trip_micros) / 1000.0;
    }
    events.record("round_formed", std::move(formed));
    if (round.num_nodes > 1 || cfg.rdzv.max_nodes > 1) {
      spdlog::info("round {}: node {} of {}, ranks {}-{} of {}", round.number, round.node_rank,
                   round.num_nodes, round.base_rank, round.base_rank + cfg.rdzv.nproc - 1,
                   round.world_size);
    }
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
