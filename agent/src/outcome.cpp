#include "outcome.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/agent/failure_json.hpp"
#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/store/local_address.hpp"
#include "exchanges/crash_loop.hpp"
#include "exchanges/failure_reports.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;

RunOutcomes::RunOutcomes(const AgentConfig& cfg, std::filesystem::path run_dir,
                         std::shared_ptr<rendezvous::Rendezvous> rdzv, EventLog& events)
    : cfg_(cfg), run_dir_(std::move(run_dir)), rdzv_(std::move(rdzv)), events_(events) {}

asio::awaitable<std::optional<AgentOutcome>> RunOutcomes::crash_looping(
    const rendezvous::Round& round, std::optional<int64_t> resumed_from) {
  if (cfg_.crash_loop_attempts == 0) co_return std::nullopt;
  std::vector<WorkerFailure> failures;
  for (const auto& text : co_await failure_reports::reported(rdzv_, round.restart_count)) {
    for (auto& f : failures_from_json(text)) failures.push_back(std::move(f));
  }
  failed_attempts_.push_back(crash_loop::signature(failures, resumed_from));
  std::optional<std::string> why = crash_loop::announced(*rdzv_);
  if (!why && round.restart_count < cfg_.rdzv.max_restarts &&
      crash_loop::repeats(failed_attempts_, cfg_.crash_loop_attempts)) {
    why = fmt::format("the last {} attempts failed the same way ({}), with {} restart(s) left",
                      cfg_.crash_loop_attempts, failed_attempts_.back(),
                      cfg_.rdzv.max_restarts - round.restart_count);
    co_await crash_loop::announce(rdzv_, *why);
  }
  if (!why) co_return std::nullopt;
  co_return crash_loop(*why, failures);
}

AgentOutcome RunOutcomes::crash_loop(const std::string& why,
                                     const std::vector<WorkerFailure>& failures) {
  spdlog::error("crash loop: {}: stopping the job (exit status 5: do not requeue it)", why);
  events_.record("crash_loop", {{"reason", why}});
  AgentOutcome out;
  out.run_log_dir = run_dir_.string();
  out.state = AgentOutcome::State::kFailed;
  out.crash_loop = true;
  out.summary = fmt::format("{} FAILED in a crash loop: {}\n", cfg_.entrypoint_name, why);
  if (!failures.empty()) {
    out.summary += format_failure_summary(cfg_.entrypoint_name, store::host_name(), failures);
  }
  return out;
}

asio::awaitable<std::optional<AgentOutcome>> RunOutcomes::settle(GroupResult& r,
                                                                 const rendezvous::Round& round) {
  AgentOutcome out;
  out.run_log_dir = run_dir_.string();
  switch (r.state) {
    case GroupResult::State::kSucceeded: {
      const bool passed = co_await rdzv_->exit_barrier(round);
      events_.record("exit_barrier", {{"round", round.number}, {"passed", passed}});
      if (passed) {
        co_await rdzv_->close("succeeded");
        out.state = AgentOutcome::State::kSucceeded;
        co_return out;
      }
      spdlog::warn("another node failed or left while this one waited at the exit barrier");
      co_await rdzv_->end_round(round, false);  // (a no-op when a peer's failure ended it)
      break;
    }
    case GroupResult::State::kStopped:
      out.state = AgentOutcome::State::kSignaled;
      out.signal = r.stop_signal;
      co_return out;
    case GroupResult::State::kFailed:
      co_await failure_reports::report(rdzv_, round, failures_to_json(r.failures));
      break;
    case GroupResult::State::kInterrupted:
      co_await rdzv_->end_round(round, false);
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

asio::awaitable<AgentOutcome> RunOutcomes::job_ended(const std::string& interrupted_by) {
  AgentOutcome out;
  out.run_log_dir = run_dir_.string();
  const rendezvous::JobEnd& end = rdzv_->ending();
  switch (end.kind) {
    case rendezvous::JobEnd::Kind::kSucceeded:
      out.state = AgentOutcome::State::kSucceeded;
      break;
    case rendezvous::JobEnd::Kind::kClosed:
      out.state = AgentOutcome::State::kLaunchError;
      out.summary = fmt::format("the job '{}' has already ended ({}); this node takes no part",
                                cfg_.rdzv.run_id, end.why);
      break;
    case rendezvous::JobEnd::Kind::kRestartsExhausted: {
      // Every node prints the same summary: all nodes' failures of the round that spent the
      // last restart.
      std::vector<WorkerFailure> failures;
      for (const auto& text : co_await failure_reports::reported(rdzv_, cfg_.rdzv.max_restarts)) {
        for (auto& f : failures_from_json(text)) failures.push_back(std::move(f));
      }
      out.summary =
          failures.empty()
              ? fmt::format("{} FAILED: {}, and no restarts remain\n", cfg_.entrypoint_name,
                            interrupted_by.empty() ? "the job failed" : interrupted_by)
              : format_failure_summary(cfg_.entrypoint_name, store::host_name(), failures);
      out.state = AgentOutcome::State::kFailed;
      break;
    }
  }
  co_return out;
}

}  // namespace ddprun::agent
