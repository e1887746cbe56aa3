#include "checkpoint/persister.hpp"

#include <algorithm>
#include <atomic>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace {

constexpr auto kHeaderPoll = std::chrono::milliseconds(200);

int64_t span_of(int64_t step, int64_t every) {
  return step >= 0 ? step / every : -((-step + every - 1) / every);
}

// The steps every one of `held` holds, oldest first.
std::set<int64_t> common_steps(const std::vector<std::vector<int64_t>>& held) {
  if (held.empty()) return {};
  std::set<int64_t> common(held.front().begin(), held.front().end());
  for (const auto& steps : held) {
    std::set<int64_t> keep;
    for (int64_t s : steps) {
      if (common.contains(s)) keep.insert(s);
    }
    common = std::move(keep);
  }
  return common;
}

// Global rank `rank`'s files of the steps after `step` saved at `world_size`, set aside
// (CheckpointPersister::abandon_after); returns the one warning that names the steps (empty where
// none was), said on the agent's thread: this thread may outlive the logger (a file system slow at
// the agent's exit).
std::string abandon_rank_after(const fs::path& dir, int rank, int64_t step, uint64_t world_size) {
  std::vector<int64_t> abandoned;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("step_")) continue;
    const fs::path file = e.path() / fmt::format("rank_{}.ddpckpt", rank);
    const std::optional<RegionHeader> h = read_region_header(file);
    if (!h || h->slots[0].step <= step || h->slots[0].world_size != world_size) continue;
    std::error_code renamed;
    fs::rename(file, e.path() / fmt::format(".rank_{}.ddpckpt.abandoned", rank), renamed);
    if (!renamed) abandoned.push_back(h->slots[0].step);
  }
  if (abandoned.empty()) return {};
  std::sort(abandoned.begin(), abandoned.end());
  return fmt::format(
      "checkpoint: global rank {}'s files of step{} {} in {} are of a timeline the job left ({}): "
      "renamed .rank_{}.ddpckpt.abandoned, never read again nor mixed with the steps saved from "
      "now on",
      rank, abandoned.size() > 1 ? "s" : "", fmt::join(abandoned, ", "), dir.string(),
      step < 0 ? std::string("it started afresh") : fmt::format("it restored step {}", step), rank);
}

}  // namespace

std::optional<int64_t> step_to_persist(const std::vector<std::vector<int64_t>>& held,
                                       std::optional<int64_t> last, int64_t every) {
  for (int64_t s : common_steps(held)) {
    if (!last || span_of(s, every) > span_of(*last, every)) return s;
  }
  return std::nullopt;
}

struct CheckpointPersister::Shared : std::enable_shared_from_this<Shared> {
  Shared(boost::asio::io_context& i, fs::path r, fs::path d, std::optional<store::Token> t,
         std::optional<uint64_t> l, Report rep)
      : io(i),
        regions(std::move(r)),
        dir(std::move(d)),
        token(std::move(t)),
        limit(l),
        report(std::move(rep)) {}

  boost::asio::io_context& io;
  fs::path regions;
  fs::path dir;
  std::optional<store::Token> token;
  std::optional<uint64_t> limit;  // the node's checkpoint budget
  Report report;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Job> jobs;
  std::optional<Job> running;  // the job under way (its `done` moved out)
  std::atomic<bool> stop{false};

  void run();
};

void CheckpointPersister::Shared::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex);
      wake.wait(lock, [this] { return stop || !jobs.empty(); });
      if (stop) return;
      job = std::move(jobs.front());
      jobs.pop_front();
      running = Job{job.kind, job.local_rank, job.rank, job.step, {}, job.world_size};
    }
    PersistReport r;
    std::string warning;
    try {
      switch (job.kind) {
        case Job::Kind::kPersist:
          r = copy_to_disk(regions, job.local_rank, job.step, dir, job.rank, stop, token, limit);
          break;
        case Job::Kind::kRestore:
          r = read_back(dir, job.step, job.rank, regions, job.local_rank, stop, token);
          break;
        case Job::Kind::kMarker:
          r.kind = PersistReport::Kind::kDropped;  // nothing to report: only its `done`
          break;
        case Job::Kind::kAbandon:
          warning = abandon_rank_after(dir, job.rank, job.step, job.world_size);
          r.kind = PersistReport::Kind::kDropped;  // said in its own warning
          break;
      }
    } catch (const std::exception& e) {
      r.kind = PersistReport::Kind::kFailed;
      r.detail = e.what();
    }
    r.local_rank = job.local_rank;
    r.rank = job.rank;
    r.step = job.step;
    // Under the lock: once the persister has set `stop`, the io_context may be gone, and a copy
    // that outlived it (a write stuck in the kernel) must not touch it.
    const std::lock_guard lock(mutex);
    running.reset();
    if (stop) return;
    boost::asio::post(io, [self = shared_from_this(), r = std::move(r),
                           warning = std::move(warning), done = std::move(job.done)] {
      if (self->stop) return;
      if (!warning.empty()) spdlog::warn("{}", warning);
      if (!r.detail.empty() || r.kind != PersistReport::Kind::kDropped) self->report(r);
      if (done) done(r);
    });
  }
}

CheckpointPersister::CheckpointPersister(boost::asio::io_context& io, fs::path regions_dir,
                                         fs::path dir, int64_t every,
                                         std::optional<store::Token> token,
                                         std::optional<uint64_t> limit, Report report)
    : io_(io),
      regions_(std::move(regions_dir)),
      dir_(std::move(dir)),
      every_(std::max<int64_t>(every, 1)),
      timer_(io),
      shared_(std::make_shared<Shared>(io, regions_, dir_, std::move(token), limit,
                                       std::move(report))) {
  fs::create_directories(dir_);
  thread_ = std::thread([shared = shared_] { shared->run(); });
}

CheckpointPersister::~CheckpointPersister() {
  *alive_ = false;
  timer_.cancel();
  {
    const std::lock_guard lock(shared_->mutex);
    shared_->stop = true;
  }
  shared_->wake.notify_all();
  // A copy ends at its next chunk; a write stuck in the kernel (a hung network file system) is
  // left to finish on its own: the thread holds what it uses.
  thread_.detach();
}

void CheckpointPersister::watch(std::vector<std::pair<int, int>> local_and_global) {
  ranks_ = std::move(local_and_global);
  timer_.cancel();
  poll();
}

std::vector<std::vector<int64_t>> CheckpointPersister::held() const {
  std::vector<std::vector<int64_t>> out;
  for (const auto& [local, global] : ranks_) {
    const auto h = read_region_header(regions_ / fmt::format("rank{}", local));
    out.push_back(h ? h->committed_steps() : std::vector<int64_t>{});
  }
  return out;
}

void CheckpointPersister::poll() {
  if (const std::optional<int64_t> step = step_to_persist(held(), last_, every_)) enqueue(*step);
  timer_.expires_after(kHeaderPoll);
  timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (!ec && *alive) poll();
  });
}

void CheckpointPersister::persist_newest() {
  const std::set<int64_t> common = common_steps(held());
  if (!common.empty() && *common.rbegin() != last_) enqueue(*common.rbegin());
}

void CheckpointPersister::enqueue(int64_t step) {
  last_ = step;
  {
    const std::lock_guard lock(shared_->mutex);
    for (const auto& [local, global] : ranks_) {
      shared_->jobs.push_back(Job{Job::Kind::kPersist, local, global, step, {}});
    }
  }
  shared_->wake.notify_one();
}

std::vector<int64_t> CheckpointPersister::steps_on_disk(int rank, uint64_t world_size) const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("step_")) continue;
    const std::optional<RegionHeader> h =
        read_region_header(e.path() / fmt::format("rank_{}.ddpckpt", rank));
    if (h && h->slots[0].state == SlotRecord::kCommitted && h->slots[0].world_size == world_size &&
        name == fmt::format("step_{}", h->slots[0].step)) {
      steps.push_back(h->slots[0].step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void CheckpointPersister::abandon_after(int64_t step, uint64_t world_size,
                                        const std::vector<int>& ranks) {
  // From the restored step on, as if nothing were persisted: the new timeline's steps are, and the
  // restored one again where the disk's differs (copy_to_disk leaves a file with its bytes as is).
  last_.reset();
  {
    const std::lock_guard lock(shared_->mutex);
    std::set<int> all(ranks.begin(), ranks.end());
    // A copy of a later step still queued is of the abandoned timeline: not written. One under
    // way may be of a rank this node no longer has (its ranks moved): that rank's later files go
    // too, or that copy would outlive the new owner's setting aside.
    const auto later = [&](const Job& j) { return j.kind == Job::Kind::kPersist && j.step > step; };
    std::erase_if(shared_->jobs, later);
    if (shared_->running && later(*shared_->running)) all.insert(shared_->running->rank);
    for (const int rank : all) {
      Job job{Job::Kind::kAbandon, -1, rank, step, {}};
      job.world_size = world_size;
      shared_->jobs.push_back(std::move(job));
    }
  }
  shared_->wake.notify_one();
}

boost::asio::awaitable<bool> CheckpointPersister::run_and_wait(std::vector<Job> jobs,
                                                               std::chrono::milliseconds limit) {
  struct Pending {
    explicit Pending(boost::asio::io_context& io) : done(io) {}
    size_t left = 0;
    bool restored = true;
    boost::asio::steady_timer done;
  };
  auto pending = std::make_shared<Pending>(io_);
  pending->done.expires_after(limit);
  pending->left = jobs.size();
  {
    const std::lock_guard lock(shared_->mutex);
    for (Job& job : jobs) {
      job.done = [pending](const PersistReport& r) {
        pending->restored = pending->restored && r.kind == PersistReport::Kind::kRestored;
        if (--pending->left == 0) pending->done.cancel();
      };
      shared_->jobs.push_back(std::move(job));
    }
  }
  shared_->wake.notify_one();
  if (pending->left > 0) {
    co_await pending->done.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  }
  co_return pending->left == 0 && pending->restored;
}

boost::asio::awaitable<bool> CheckpointPersister::restore(
    int64_t step, std::vector<std::pair<int, int>> local_and_global) {
  std::vector<Job> jobs;
  for (const auto& [local, global] : local_and_global) {
    jobs.push_back(Job{Job::Kind::kRestore, local, global, step, {}});
  }
  co_return co_await run_and_wait(std::move(jobs), std::chrono::hours(24));
}

boost::asio::awaitable<void> CheckpointPersister::drain(std::chrono::milliseconds limit) {
  std::vector<Job> marker(1);
  marker.front().kind = Job::Kind::kMarker;
  co_await run_and_wait(std::move(marker), limit);
}

}  // namespace ddprun::agent
