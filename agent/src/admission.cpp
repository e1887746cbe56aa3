#include "admission.hpp"

#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "node/bounded_command.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;

namespace {

// How long a restart waits for the GPU memory of the workers that ended to be released.
constexpr auto kGpuMemoryWait = std::chrono::seconds(10);

// How long NVML has to answer a read of every GPU (it takes milliseconds; a wedged device can
// hold it for minutes).
constexpr auto kNvmlAnswerWithin = std::chrono::seconds(30);

// The buffer each link all-reduces when the straggler check measures the links while the workers
// train: a quarter of the node check's, so that a slow link's measurement (every link's fastest of
// several) is over four times sooner; the job's own traffic shares the links meanwhile. That
// measurement runs no compute kernel: the workers' step times already say how long each node
// computes, and a kernel beside them (taking turns with the nodes that share a host) took most of
// the measurement's time.
constexpr int kLinkKibWhileTraining = 1024;

// Why a read of the GPUs came back empty-handed.
std::string nvml_silent(const GpuReader& gpus) {
  return fmt::format("NVML gave no answer within {} s (a GPU or its driver wedged, or NVML failed)",
                     std::chrono::duration_cast<std::chrono::seconds>(gpus.limit()).count());
}

}  // namespace

NodeAdmission::NodeAdmission(asio::io_context& io, const AgentConfig& cfg,
                             std::filesystem::path run_dir,
                             std::shared_ptr<rendezvous::Rendezvous> rdzv, EventLog& events,
                             Containment& containment, std::shared_ptr<const Nvml> nvml)
    : io_(io),
      cfg_(cfg),
      run_dir_(std::move(run_dir)),
      rdzv_(std::move(rdzv)),
      events_(events),
      containment_(containment) {
  if (nvml != nullptr) {
    gpus_.emplace(
        io, [nvml] { return nvml->read(); },
        std::chrono::duration_cast<std::chrono::milliseconds>(kNvmlAnswerWithin));
  }
}

asio::awaitable<std::optional<AgentOutcome>> NodeAdmission::unhealthy() {
  std::optional<std::string> why;
  if (gpus_) {
    const std::optional<std::vector<GpuState>> now = co_await gpus_->read();
    const std::string problem =
        now ? gpu_health_problem(*now, gpu_device_nodes()) : nvml_silent(*gpus_);
    if (!problem.empty()) why = "GPUs: " + problem;
  }
  if (!why && !cfg_.health_check.empty()) {
    why = co_await run_bounded_command(io_, containment_, cfg_.health_check,
                                       cfg_.health_check_timeout, cfg_.env,
                                       (run_dir_ / "health_check.log").string());
  }
  if (!why) co_return std::nullopt;
  spdlog::error("health check failed ({}): this node stays out of the job", *why);
  nlohmann::json fields;
  fields["reason"] = *why;
  events_.record("health_check_failed", std::move(fields));
  AgentOutcome out;
  out.run_log_dir = run_dir_.string();
  out.state = AgentOutcome::State::kUnhealthy;
  out.summary = "the health check failed (" + *why + ")";
  co_return out;
}

// The node check's verdict on `round` from measurement `first_pass` on, measured as `when` asks
// (nullopt: the round ended before it came), with this node's last measurement in `mine`. A
// verdict naming a node measured slow is measured again, longer, by every node, and a suspect
// stays out only where it was slow or silent again (node_check::confirmed); the suspects it no
// longer names go to `unconfirmed`.
asio::awaitable<std::optional<node_check::Verdict>> NodeAdmission::node_check_verdict(
    const rendezvous::Round& round, const rendezvous::WorkerStoreAddress& store, int first_pass,
    When when, ProbeReport& mine, std::vector<int>& unconfirmed) {
  NodeProbeRun how;
  if (when == When::kWhileTraining) {
    how.link_kib = kLinkKibWhileTraining;
    how.links_only = true;
  }
  how.program = cfg_.node_probe;
  how.run_id = cfg_.rdzv.run_id;
  how.timeout = cfg_.node_check_timeout;
  how.env = cfg_.env;
  how.dir = run_dir_;
  how.gpu = gpus_.has_value();
  const auto wait = cfg_.node_check_timeout + std::chrono::seconds(5);
  std::optional<node_check::Verdict> first;  // pass 0's, once it needs confirming
  for (int pass = first_pass; pass < first_pass + 2; ++pass) {
    how.pass = pass;
    mine = co_await run_node_probe(io_, containment_, how, round, store);
    if (!mine.failed.empty()) spdlog::error("node check: {}", mine.failed);
    const std::optional<node_check::Verdict> verdict = co_await node_check::exchange(
        rdzv_, round, pass, mine, cfg_.node_check_factor, wait, first);
    if (!verdict) co_return verdict;
    if (pass > first_pass) {
      for (const node_check::SlowNode& s : first->slow) {
        if (verdict->kept_out(s.node_rank) == nullptr) unconfirmed.push_back(s.node_rank);
      }
    }
    if (pass > first_pass || !verdict->needs_confirmation()) co_return verdict;
    for (const node_check::SlowNode& s : verdict->slow) {
      spdlog::warn("node check: node {} measured slow ({} {}): measuring again to confirm",
                   s.node_rank, s.probe,
                   s.ratio > 0 ? fmt::format("{:.2f}x the round's median", s.ratio) : s.detail);
    }
    first = verdict;
  }
  co_return first;
}

asio::awaitable<NodeAdmission::Checked> NodeAdmission::check_nodes(
    const rendezvous::Round& round, const rendezvous::WorkerStoreAddress& store,
    AgentOutcome& out) {
  if (!cfg_.node_check) co_return Checked::kGoOn;
  if (round.num_nodes < 2) {
    spdlog::info("node check: round {} has one node, nothing to compare it with: not run",
                 round.number);
    co_return Checked::kGoOn;
  }
  if (!co_await node_check::needed(rdzv_, round)) {
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
      co_await node_check_verdict(round, store, 0, When::kBeforeWorkers, mine, unconfirmed);
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
  events_.record("node_check", fields);
  const std::string named = fmt::format("--node_check_factor {:g}", cfg_.node_check_factor);
  if (const node_check::SlowNode* me = verdict->kept_out(round.node_rank)) {
    std::string why = fmt::format("{}: {} ({})", me->probe, me->detail, named);
    if (me->probe == "no answer") {
      why = fmt::format("its probe gave no answer: {}", me->detail);
    } else if (me->ratio > 0) {
      why = fmt::format("{} {:.2f}x slower than the round's median ({}; {})", me->probe, me->ratio,
                        me->detail, named);
    }
    spdlog::error("node check: this node stays out of the job: {}", why);
    events_.record("node_check_failed", {{"round", round.number},
                                         {"probe", me->probe},
                                         {"ratio", me->ratio},
                                         {"detail", me->detail}});
    out.run_log_dir = run_dir_.string();
    out.state = AgentOutcome::State::kUnhealthy;
    out.summary = "the node check found this node slow: " + why;
    co_return Checked::kThisNodeOut;
  }
  co_await node_check::passed(rdzv_, round);
  for (int node : unconfirmed) {
    spdlog::info("node check: node {} was not slow when measured again: it stays in", node);
  }
  if (verdict->slow.empty()) {
    spdlog::info("node check: {} nodes within {:g}x the round's median, in {:.2f} s",
                 round.num_nodes, cfg_.node_check_factor, seconds);
    co_return Checked::kGoOn;
  }
  for (const node_check::SlowNode& s : verdict->slow) {
    spdlog::warn("node check: node {} ({}) is kept out: {} {}", s.node_rank,
                 round.members.at(static_cast<size_t>(s.node_rank)), s.probe,
                 s.ratio > 0 ? fmt::format("{:.2f}x the round's median", s.ratio) : s.detail);
  }
  co_return Checked::kAnotherNodeOut;
}

asio::awaitable<std::optional<node_check::Verdict>> NodeAdmission::measure_again(
    rendezvous::Round round, rendezvous::WorkerStoreAddress store, int first_pass) {
  ProbeReport mine;
  std::vector<int> unconfirmed;
  co_return co_await node_check_verdict(round, store, first_pass, When::kWhileTraining, mine,
                                        unconfirmed);
}

asio::awaitable<void> NodeAdmission::gpu_memory_released(const std::vector<int>& pids) {
  if (!gpus_ || pids.empty()) co_return;
  const auto deadline = std::chrono::steady_clock::now() + kGpuMemoryWait;
  asio::steady_timer tick(io_);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const std::optional<std::vector<GpuState>> now =
        co_await gpus_->read(std::max(left, std::chrono::milliseconds(0)));
    if (!now) {
      spdlog::warn("not waiting for the GPU memory of ended worker(s) {}: {}",
                   fmt::join(pids, ", "), nvml_silent(*gpus_));
      co_return;
    }
    const std::vector<int> held = still_on_gpus(*now, pids);
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

}  // namespace ddprun::agent
