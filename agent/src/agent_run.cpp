#include "agent_run.hpp"

#include <algorithm>
#include <atomic>
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

#include "checkpoint/round_restore.hpp"
#include "ddprun/agent/failure_json.hpp"
#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/store/local_address.hpp"
#include "exchanges/checkpoint_agreement.hpp"
#include "exchanges/checkpoint_sources.hpp"
#include "exchanges/checkpoint_stride.hpp"
#include "exchanges/crash_loop.hpp"
#include "exchanges/failure_reports.hpp"
#include "exchanges/hang_exchange.hpp"
#include "exchanges/node_check.hpp"
#include "exchanges/role_ranks.hpp"
#include "exchanges/stop_exchange.hpp"
#include "node/bounded_command.hpp"
#include "node/node_probe.hpp"
#include "watchers/worker_stacks.hpp"
#include "workers/restart_phases.hpp"
#include "workers/round_plan.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// How long a job that ended waits for its checkpoints' copies to --checkpoint_dir.
constexpr auto kPersistDrainLimit = std::chrono::minutes(10);
// How long a restart waits for the GPU memory of the workers that ended to be released.
constexpr auto kGpuMemoryWait = std::chrono::seconds(10);

struct Run : AgentParts {
  explicit Run(const AgentParts& parts) : AgentParts(parts) {}

  bool checked_for_next_round = false;       // the health check ran just before joining
  std::vector<std::string> failed_attempts;  // crash_loop::signature of each ended round
  RestartClock restart_clock;                // the restart under way, phase by phase

  // --health_check, before this node takes part in a round: nullopt when it passes (or there is
  // none), else the outcome of a node that stays out.
  asio::awaitable<std::optional<AgentOutcome>> unhealthy() {
    std::optional<std::string> why;
    if (nvml != nullptr) {
      const std::string problem = gpu_health_problem(nvml->read(), gpu_device_nodes());
      if (!problem.empty()) why = "GPUs: " + problem;
    }
    if (!why && !cfg.health_check.empty()) {
      why =
          co_await run_bounded_command(io, containment, cfg.health_check, cfg.health_check_timeout,
                                       cfg.env, (run_dir / "health_check.log").string());
    }
    if (!why) co_return std::nullopt;
    spdlog::error("health check failed ({}): this node stays out of the job", *why);
    nlohmann::json fields;
    fields["reason"] = *why;
    events.record("health_check_failed", std::move(fields));
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    out.state = AgentOutcome::State::kUnhealthy;
    out.summary = "the health check failed (" + *why + ")";
    co_return out;
  }

  // The node check's verdict on `round` (nullopt: the round ended before it came), with this
  // node's last measurement in `mine`. A verdict naming a node measured slow is measured again,
  // longer, by every node, and only what both measurements found counts; the nodes it no longer
  // names go to `unconfirmed`.
  asio::awaitable<std::optional<node_check::Verdict>> node_check_verdict(
      const rendezvous::Round& round, const rendezvous::WorkerStoreAddress& store,
      ProbeReport& mine, std::vector<int>& unconfirmed) {
    NodeProbeRun how;
    how.program = cfg.node_probe;
    how.run_id = cfg.rdzv.run_id;
    how.timeout = cfg.node_check_timeout;
    how.env = cfg.env;
    how.dir = run_dir;
    how.gpu = nvml != nullptr;
    const auto wait = cfg.node_check_timeout + std::chrono::seconds(5);
    std::optional<node_check::Verdict> first;  // pass 0's, once it needs confirming
    for (int pass = 0; pass < 2; ++pass) {
      how.pass = pass;
      mine = co_await run_node_probe(io, containment, how, round, store);
      if (!mine.failed.empty()) spdlog::error("node check: {}", mine.failed);
      const std::optional<node_check::Verdict> verdict = co_await node_check::exchange(
          rdzv, round, pass, mine, cfg.node_check_factor, wait, first);
      if (!verdict) co_return verdict;
      if (pass == 1) {
        for (const node_check::SlowNode& s : first->slow) {
          if (verdict->kept_out(s.node_rank) == nullptr) unconfirmed.push_back(s.node_rank);
        }
      }
      if (pass == 1 || !verdict->needs_confirmation()) co_return verdict;
      for (const node_check::SlowNode& s : verdict->slow) {
        spdlog::warn("node check: node {} measured slow ({} {}): measuring again to confirm",
                     s.node_rank, s.probe,
                     s.ratio > 0 ? fmt::format("{:.2f}x the round's median", s.ratio) : s.detail);
      }
      first = verdict;
    }
    co_return first;
  }

  // What --node_check decided for a round before its workers start.
  enum class Checked { kGoOn, kThisNodeOut, kAnotherNodeOut };

  // --node_check, once `round` formed and before its workers start, where it has a member not
  // checked before: every node's probe runs, node rank 0 judges, and every node acts on the same
  // verdict. kThisNodeOut sets `out` (this node stays out, as after a failed health check);
  // kAnotherNodeOut: the round re-forms once the nodes kept out (or a verdict that never came)
  // have left it.
  asio::awaitable<Checked> check_nodes(const rendezvous::Round& round,
                                       const rendezvous::WorkerStoreAddress& store,
                                       AgentOutcome& out) {
    if (!cfg.node_check) co_return Checked::kGoOn;
    if (round.num_nodes < 2) {
      spdlog::info("node check: round {} has one node, nothing to compare it with: not run",
                   round.number);
      co_return Checked::kGoOn;
    }
    if (!co_await node_check::needed(rdzv, round)) {
      spdlog::info(
          "node check: every node of round {} passed a check of this job before: not run "
          "again",
          round.number);
      co_return Checked::kGoOn;
    }
    const auto started = std::chrono::steady_clock::now();
    ProbeReport mine;
    std::vector<int> unconfirmed;
    const std::optional<node_check::Verdict> verdict =
        co_await node_check_verdict(round, store, mine, unconfirmed);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (!verdict) {
      spdlog::warn("node check: round {} ended before its verdict came", round.number);
      co_return Checked::kAnotherNodeOut;
    }
    nlohmann::json fields = verdict->to_json();
    fields["round"] = round.number;
    fields["seconds"] = seconds;
    fields["this_node"] = mine.to_json();
    fields["unconfirmed"] = unconfirmed;
    for (auto& s : fields["slow"]) {
      s["node"] = round.members.at(s["node_rank"].get<size_t>());
    }
    events.record("node_check", fields);
    const std::string named = fmt::format("--node_check_factor {:g}", cfg.node_check_factor);
    if (const node_check::SlowNode* me = verdict->kept_out(round.node_rank)) {
      std::string why = fmt::format("{}: {} ({})", me->probe, me->detail, named);
      if (me->probe == "no answer") {
        why = fmt::format("its probe gave no answer: {}", me->detail);
      } else if (me->ratio > 0) {
        why = fmt::format("{} {:.2f}x slower than the round's median ({}; {})", me->probe,
                          me->ratio, me->detail, named);
      }
      spdlog::error("node check: this node stays out of the job: {}", why);
      events.record("node_check_failed", {{"round", round.number},
                                          {"probe", me->probe},
                                          {"ratio", me->ratio},
                                          {"detail", me->detail}});
      out.run_log_dir = run_dir.string();
      out.state = AgentOutcome::State::kUnhealthy;
      out.summary = "the node check found this node slow: " + why;
      co_return Checked::kThisNodeOut;
    }
    co_await node_check::passed(rdzv, round);
    for (int node : unconfirmed) {
      spdlog::info("node check: node {} was not slow when measured again: it stays in", node);
    }
    if (verdict->slow.empty()) {
      spdlog::info("node check: {} nodes within {:g}x the round's median, in {:.2f} s",
                   round.num_nodes, cfg.node_check_factor, seconds);
      co_return Checked::kGoOn;
    }
    for (const node_check::SlowNode& s : verdict->slow) {
      spdlog::warn("node check: node {} ({}) is kept out: {} {}", s.node_rank,
                   round.members.at(static_cast<size_t>(s.node_rank)), s.probe,
                   s.ratio > 0 ? fmt::format("{:.2f}x the round's median", s.ratio) : s.detail);
    }
    co_return Checked::kAnotherNodeOut;
  }

  // Before workers start again on this node's GPUs: waits (bounded) until none of `pids`, the
  // workers that ended, still holds GPU memory, which the driver releases after they exit.
  asio::awaitable<void> gpu_memory_released(const std::vector<int>& pids) {
    if (nvml == nullptr || pids.empty()) co_return;
    const auto deadline = std::chrono::steady_clock::now() + kGpuMemoryWait;
    asio::steady_timer tick(io);
    for (;;) {
      const std::vector<int> held = still_on_gpus(nvml->read(), pids);
      if (held.empty()) co_return;
      if (std::chrono::steady_clock::now() >= deadline) {
        spdlog::warn("GPU memory of ended worker(s) {} not released after {} s; going on",
                     fmt::join(held, ", "),
                     std::chrono::duration_cast<std::chrono::seconds>(kGpuMemoryWait).count());
        co_return;
      }
      tick.expires_after(std::chrono::milliseconds(100));
      co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

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

  // After a hang anywhere in the round: every node's ranks grouped by their innermost frames,
  // logged here as on every node, and in this node's hung workers' failures (the summary).
  asio::awaitable<void> summarise_hang(const rendezvous::Round& round, GroupResult& r) {
    std::map<int, std::string> frames = r.frames;
    std::map<int, int> node_of_rank;
    for (const auto& [rank, frame] : r.frames) node_of_rank[rank] = round.node_rank;
    if (round.num_nodes > 1) {
      // Each node collects its stacks within its stack-dump limit and its shutdown timeout.
      const auto wait = cfg.shutdown_timeout + std::chrono::seconds(5);
      // Each node's text starts with its node rank, on a line that is no frame's.
      std::string mine = fmt::format("node\t{}\n{}", round.node_rank, frames_to_text(r.frames));
      for (const std::string& text : co_await hang_exchange::frames(rdzv, round, mine, wait)) {
        int node = -1;
        if (text.starts_with("node\t")) node = std::atoi(text.c_str() + 5);
        for (auto& [rank, frame] : frames_from_text(text)) {
          if (node >= 0) node_of_rank.emplace(rank, node);
          frames.emplace(rank, std::move(frame));
        }
      }
    }
    if (frames.empty()) co_return;
    const std::string culprit = hang_culprit(frames, node_of_rank);
    const std::string grouped = ranks_by_frame(frames);
    if (!culprit.empty()) spdlog::error("hang: {}", culprit);
    spdlog::error("hang: every rank's innermost frame: {}", grouped);
    for (auto& f : r.failures) {
      if (f.ended_because.empty()) continue;
      f.ended_because = (culprit.empty() ? "" : "hang: " + culprit + "\n") + f.ended_because +
                        "\nevery rank's innermost frame: " + grouped;
    }
  }

  asio::awaitable<AgentOutcome> run() {
    std::exception_ptr error;
    AgentOutcome out;
    bool joined = false;
    group.on_first_progress([this](const AttemptTimes& times) { restart_measured(times); });
    try {
      if (std::optional<AgentOutcome> sick = co_await unhealthy()) {
        out = std::move(*sick);
      } else {
        checked_for_next_round = true;
        joined = true;
        co_await rdzv->join();
        // A job without a token: the checkpoint copies prove the job's secret, which only a
        // member can read.
        if (peers != nullptr && !cfg.rdzv.auth_token) {
          peers->use_secret(store::Token(co_await rdzv->job_secret()));
        }
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
        if (std::optional<AgentOutcome> sick = co_await unhealthy()) co_return std::move(*sick);
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
        if (const auto loop = crash_loop::announced(*rdzv)) co_return crash_loop_outcome(*loop, {});
        AgentOutcome ended = co_await job_ended(interrupted_by);
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
      const Checked checked = co_await check_nodes(*round, store, kept_out);
      if (checked == Checked::kThisNodeOut) co_return kept_out;
      if (checked == Checked::kAnotherNodeOut) {  // the round re-forms without them
        interrupted_by = co_await rdzv->interruption(*round);
        co_await rdzv->end_round(*round, false);
        continue;
      }
      const fs::path attempt_dir = run_dir / fmt::format("attempt_{}", round->restart_count);
      fs::remove_all(attempt_dir);
      const std::optional<CheckpointRestore> restore = co_await agreed_checkpoint(*round);
      const RoleRanks roles = co_await role_ranks_of(*round);
      std::vector<WorkerLaunch> launches =
          plan_round(cfg, attempt_dir, *round, *master, bindings, restore, roles);
      if (persister != nullptr) persister->watch(round_ranks(cfg, *round));
      checkpoint_status.watch(round_ranks(cfg, *round));
      auto [r, why] = co_await run_watched(launches, *round);
      if (replicator != nullptr) replicator->stop();  // what the next round restores stays put
      if (!why.empty()) interrupted_by = why;
      restart_measured(r.times);  // its workers ended before any progress
      record_checkpoints_held(*round);
      if (!r.stacks.empty()) {
        const fs::path stacks = attempt_dir / "hang_stacks.log";
        std::ofstream(stacks) << r.stacks;
        spdlog::error("hang: every rank's stack is in {}", stacks.string());
      }
      if (r.hang || hang_exchange::peer_hang(*rdzv, *round)) co_await summarise_hang(*round, r);
      if (r.state == GroupResult::State::kFailed || r.state == GroupResult::State::kInterrupted) {
        co_await gpu_memory_released(r.pids);
      }
      if (r.state == GroupResult::State::kFailed && !r.failures.empty()) {
        own_failure = r.failures.front().exitcode;
        if (persister != nullptr) persister->persist_newest();
      }
      const rendezvous::Round& ran = *round;
      if (std::optional<AgentOutcome> ended = co_await settle(r, ran)) co_return std::move(*ended);
      const std::optional<int64_t> resumed = restore ? std::optional(restore->step) : std::nullopt;
      if (std::optional<AgentOutcome> loop = co_await crash_looping(ran, resumed)) {
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

  // After a round that ended with another to follow: whether the job is in a crash loop, by this
  // node's account of its failed attempts or another node's announcement; then its outcome here.
  asio::awaitable<std::optional<AgentOutcome>> crash_looping(const rendezvous::Round& round,
                                                             std::optional<int64_t> resumed_from) {
    if (cfg.crash_loop_attempts == 0) co_return std::nullopt;
    std::vector<WorkerFailure> failures;
    for (const auto& text : co_await failure_reports::reported(rdzv, round.restart_count)) {
      for (auto& f : failures_from_json(text)) failures.push_back(std::move(f));
    }
    failed_attempts.push_back(crash_loop::signature(failures, resumed_from));
    std::optional<std::string> why = crash_loop::announced(*rdzv);
    if (!why && round.restart_count < cfg.rdzv.max_restarts &&
        crash_loop::repeats(failed_attempts, cfg.crash_loop_attempts)) {
      why = fmt::format("the last {} attempts failed the same way ({}), with {} restart(s) left",
                        cfg.crash_loop_attempts, failed_attempts.back(),
                        cfg.rdzv.max_restarts - round.restart_count);
      co_await crash_loop::announce(rdzv, *why);
    }
    if (!why) co_return std::nullopt;
    co_return crash_loop_outcome(*why, failures);
  }

  AgentOutcome crash_loop_outcome(const std::string& why,
                                  const std::vector<WorkerFailure>& failures) {
    spdlog::error("crash loop: {}: stopping the job (exit status 5: do not requeue it)", why);
    events.record("crash_loop", {{"reason", why}});
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    out.state = AgentOutcome::State::kFailed;
    out.crash_loop = true;
    out.summary = fmt::format("{} FAILED in a crash loop: {}\n", cfg.entrypoint_name, why);
    if (!failures.empty()) {
      out.summary += format_failure_summary(cfg.entrypoint_name, store::host_name(), failures);
    }
    return out;
  }

  // Per local rank of `round`, the steps its in-memory checkpoint region holds.
  std::vector<std::vector<int64_t>> held_steps(const rendezvous::Round& round) const {
    std::vector<std::vector<int64_t>> held;
    for (const auto& [local, global] : round_ranks(cfg, round)) {
      held.push_back(checkpoints.steps_held(local));
    }
    return held;
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

  // The checkpoint the round's workers restore (checkpoint/round_restore.hpp); then, with the
  // restore done (its transfers have the links and the memory to themselves), this node's copies
  // go to its peer of the round.
  asio::awaitable<std::optional<CheckpointRestore>> agreed_checkpoint(
      const rendezvous::Round& round) {
    if (replicator != nullptr) replicator->stop();  // the kept steps stay as they are meanwhile
    const auto me = static_cast<size_t>(round.node_rank);
    const RestoreParts parts{
        cfg,
        rdzv,
        events,
        checkpoints,
        slot_sources,
        peers,
        peer_host,
        persister,
        me < round.members.size() ? round.members[me] : std::to_string(round.node_rank)};
    const RoundRestore restored = co_await restore_round(parts, round);
    checkpoint_status.restored(restored.account);
    if (!restored.nodes.empty()) copy_to_peer(round, restored.nodes);
    co_return restored.restore;
  }

  // This node's copies go to the next node of the round (node k's to node k+1 mod n); none with
  // one node.
  void copy_to_peer(const rendezvous::Round& round,
                    const std::vector<checkpoint_sources::NodeCheckpoints>& nodes) {
    if (replicator == nullptr) return;
    std::vector<RankSlot> ranks;
    for (const auto& [local, global] : round_ranks(cfg, round)) ranks.push_back({local, global});
    std::optional<PeerAddress> peer;
    if (nodes.size() > 1) {
      const auto& next = nodes[(static_cast<size_t>(round.node_rank) + 1) % nodes.size()];
      if (next.port != 0) peer = PeerAddress{next.host, next.port};
    }
    replicator->watch(nodes[static_cast<size_t>(round.node_rank)].id, std::move(ranks),
                      std::move(peer), checkpoint_stride::board(rdzv, round));
  }

  // The event log's account of the in-memory checkpoints once a round's workers ended: per local
  // rank the steps its region holds, and the bytes of the node's regions; in a job of several
  // nodes also the safe step (every local rank's copy on the peer), the peer, and the copies this
  // node holds for others (per origin node, per local rank).
  void record_checkpoints_held(const rendezvous::Round& round) {
    const std::vector<std::vector<int64_t>> held = held_steps(round);
    if (std::all_of(held.begin(), held.end(), [](const auto& steps) { return steps.empty(); })) {
      return;
    }
    nlohmann::json fields = {
        {"round", round.number}, {"steps", held}, {"bytes", checkpoints.bytes_held()}};
    if (replicator != nullptr) {
      const std::optional<int64_t> safe = replicator->safe_step();
      fields["safe_step"] = safe ? nlohmann::json(*safe) : nlohmann::json(nullptr);
      fields["peer"] = replicator->peer();
      fields["stride"] = replicator->stride();
      fields["peer_copies"] = peers->copies().steps();
    }
    events.record("checkpoints_held", std::move(fields));
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

  // What the end of this node's attempt in `round` means: the job's outcome on this node, or
  // nullopt where another round follows (the rendezvous told of the failure or the interruption).
  asio::awaitable<std::optional<AgentOutcome>> settle(GroupResult& r,
                                                      const rendezvous::Round& round) {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    switch (r.state) {
      case GroupResult::State::kSucceeded: {
        const bool passed = co_await rdzv->exit_barrier(round);
        events.record("exit_barrier", {{"round", round.number}, {"passed", passed}});
        if (passed) {
          co_await rdzv->close("succeeded");
          out.state = AgentOutcome::State::kSucceeded;
          co_return out;
        }
        spdlog::warn("another node failed or left while this one waited at the exit barrier");
        co_await rdzv->end_round(round, false);  // (a no-op when a peer's failure ended it)
        break;
      }
      case GroupResult::State::kStopped:
        out.state = AgentOutcome::State::kSignaled;
        out.signal = r.stop_signal;
        co_return out;
      case GroupResult::State::kFailed:
        co_await failure_reports::report(rdzv, round, failures_to_json(r.failures));
        break;
      case GroupResult::State::kInterrupted:
        co_await rdzv->end_round(round, false);
        break;
      case GroupResult::State::kUnhealthy:
        // No restart here (a fresh worker would meet what holds the stuck one): the node
        // leaves, and the job goes on without it where it can.
        out.state = AgentOutcome::State::kUnhealthy;
        out.summary = r.unhealthy;
        co_return out;
    }
    co_return std::nullopt;
  }

  asio::awaitable<AgentOutcome> job_ended(const std::string& interrupted_by) {
    AgentOutcome out;
    out.run_log_dir = run_dir.string();
    const rendezvous::JobEnd& end = rdzv->ending();
    switch (end.kind) {
      case rendezvous::JobEnd::Kind::kSucceeded:
        out.state = AgentOutcome::State::kSucceeded;
        break;
      case rendezvous::JobEnd::Kind::kClosed:
        out.state = AgentOutcome::State::kLaunchError;
        out.summary = fmt::format("the job '{}' has already ended ({}); this node takes no part",
                                  cfg.rdzv.run_id, end.why);
        break;
      case rendezvous::JobEnd::Kind::kRestartsExhausted: {
        // Every node prints the same summary: all nodes' failures of the round that spent the
        // last restart.
        std::vector<WorkerFailure> failures;
        for (const auto& text : co_await failure_reports::reported(rdzv, cfg.rdzv.max_restarts)) {
          for (auto& f : failures_from_json(text)) failures.push_back(std::move(f));
        }
        out.summary =
            failures.empty()
                ? fmt::format("{} FAILED: {}, and no restarts remain\n", cfg.entrypoint_name,
                              interrupted_by.empty() ? "the job failed" : interrupted_by)
                : format_failure_summary(cfg.entrypoint_name, store::host_name(), failures);
        out.state = AgentOutcome::State::kFailed;
        break;
      }
    }
    co_return out;
  }
};

}  // namespace

asio::awaitable<AgentOutcome> run_job(const AgentParts& parts) {
  Run run(parts);
  AgentOutcome out = co_await run.run();
  if (parts.persister != nullptr && out.state != AgentOutcome::State::kSignaled) {
    // The job ended (not stopped): its newest checkpoint goes to --checkpoint_dir too, and the
    // agent waits for the copies (a signal ends the wait).
    parts.persister->persist_newest();
    co_await parts.persister->drain(kPersistDrainLimit);
  }
  co_return out;
}

}  // namespace ddprun::agent
