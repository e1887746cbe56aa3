#include "checkpoint/persister.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <set>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace {

constexpr auto kPoll = std::chrono::milliseconds(200);
constexpr size_t kChunk = 8 << 20;
constexpr uint64_t kFileSlotRounding = 1 << 20;

uint64_t up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

int64_t span_of(int64_t step, int64_t every) {
  return step >= 0 ? step / every : -((-step + every - 1) / every);
}

[[noreturn]] void fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// A file removed on scope exit unless kept.
struct Partial {
  fs::path path;
  bool kept = false;
  explicit Partial(fs::path p) : path(std::move(p)) {}
  ~Partial() {
    std::error_code ignored;
    if (!kept) fs::remove(path, ignored);
  }
  Partial(const Partial&) = delete;
  Partial& operator=(const Partial&) = delete;
};

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

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

int open_or_fail(const fs::path& p, int flags) {
  const int fd = ::open(p.c_str(), flags | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot open " + p.string());
  return fd;
}

void read_all(int fd, char* p, size_t n, uint64_t at, const fs::path& name) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = EIO;
      fail("cannot read " + name.string());
    }
    p += got;
    n -= static_cast<size_t>(got);
    at += static_cast<uint64_t>(got);
  }
}

void write_all(int fd, const char* p, size_t n, uint64_t at, const fs::path& name) {
  while (n > 0) {
    const ssize_t put = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail("cannot write " + name.string());
    p += put;
    n -= static_cast<size_t>(put);
    at += static_cast<uint64_t>(put);
  }
}

std::optional<RegionHeader> read_header(int fd, const fs::path& name) {
  std::string bytes(kRegionHeaderRead, '\0');
  read_all(fd, bytes.data(), bytes.size(), 0, name);
  return parse_region_header(bytes);
}

// Copies `size` bytes from `in` at `from` to `out` at `to`, returning their word sum; stops early
// (nullopt) once `stop` is set.
std::optional<uint64_t> copy_summing(int in, uint64_t from, int out, uint64_t to, uint64_t size,
                                     const fs::path& in_name, const fs::path& out_name,
                                     const std::atomic<bool>& stop) {
  std::string buffer(std::min<uint64_t>(size, kChunk), '\0');
  uint64_t sum = 0;
  for (uint64_t done = 0; done < size; done += buffer.size()) {
    if (stop) return std::nullopt;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - done));
    read_all(in, buffer.data(), n, from + done, in_name);
    sum = add_words(sum, buffer.data(), n);
    write_all(out, buffer.data(), n, to + done, out_name);
    if (n < buffer.size()) break;
  }
  return sum;
}

void sync_and_rename(int fd, const fs::path& from, const fs::path& to) {
  if (::fdatasync(fd) != 0) fail("cannot write " + from.string());
  fs::rename(from, to);
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
  Shared(boost::asio::io_context& i, fs::path r, fs::path d, Report rep)
      : io(i), regions(std::move(r)), dir(std::move(d)), report(std::move(rep)) {}

  boost::asio::io_context& io;
  fs::path regions;
  fs::path dir;
  Report report;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Job> jobs;
  std::atomic<bool> stop{false};

  void run();
  PersistReport persist(const Job& job) const;
  PersistReport restore(const Job& job) const;
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
    }
    PersistReport r;
    try {
      switch (job.kind) {
        case Job::Kind::kPersist:
          r = persist(job);
          break;
        case Job::Kind::kRestore:
          r = restore(job);
          break;
        case Job::Kind::kMarker:
          r.kind = PersistReport::Kind::kDropped;  // nothing to report: only its `done`
          break;
      }
    } catch (const std::exception& e) {
      r.kind = PersistReport::Kind::kFailed;
      r.detail = e.what();
    }
    r.local_rank = job.local_rank;
    r.rank = job.rank;
    r.step = job.step;
    boost::asio::post(io,
                      [self = shared_from_this(), r = std::move(r), done = std::move(job.done)] {
                        if (self->stop) return;
                        if (!r.detail.empty() || r.kind != PersistReport::Kind::kDropped)
                          self->report(r);
                        if (done) done(r);
                      });
  }
}

PersistReport CheckpointPersister::Shared::persist(const Job& job) const {
  const auto started = std::chrono::steady_clock::now();
  PersistReport r;
  const fs::path region = regions / fmt::format("rank{}", job.local_rank);
  const Fd in(open_or_fail(region, O_RDONLY));
  const std::optional<RegionHeader> h = read_header(in.fd, region);
  const int slot = h ? h->slot_of(job.step) : -1;
  r.kind = PersistReport::Kind::kDropped;
  if (slot < 0) {
    r.detail = "the worker saved twice more before the copy began";
    return r;
  }
  const SlotRecord rec = h->slots[slot];
  const fs::path folder = dir / fmt::format("step_{}", job.step);
  const fs::path file = folder / fmt::format("rank_{}.ddpckpt", job.rank);
  if (fs::exists(file)) return r;  // persisted before (a failure's copy of a step already there)
  fs::create_directories(folder);
  const fs::path tmp = folder / fmt::format(".rank_{}.ddpckpt.tmp", job.rank);
  const struct FolderIfEmpty {  // a step folder that ends up empty goes (after the partial file)
    const fs::path& path;
    ~FolderIfEmpty() {
      std::error_code ignored;
      if (fs::is_empty(path, ignored)) fs::remove(path, ignored);
    }
  } folder_if_empty{folder};
  Partial partial(tmp);
  const Fd out(open_or_fail(tmp, O_RDWR | O_CREAT | O_TRUNC));
  const std::string header =
      region_header_for(rec, up(rec.size, kFileSlotRounding), h->save_micros[slot]);
  write_all(out.fd, header.data(), header.size(), 0, tmp);
  const std::optional<uint64_t> sum =
      copy_summing(in.fd, kRegionHeader + slot * h->slot_size, out.fd, kRegionHeader, rec.size,
                   region, tmp, stop);
  const std::optional<RegionHeader> after = read_header(in.fd, region);
  if (!sum || *sum != rec.checksum || !after || after->slot_of(job.step) != slot ||
      after->slots[slot].sequence != rec.sequence) {
    r.detail = sum ? "the worker reused the slot during the copy" : "the agent is stopping";
    return r;
  }
  if (rec.metadata_size > 0) {  // a torch.distributed.checkpoint save's job metadata
    std::string metadata(rec.metadata_size, '\0');
    read_all(out.fd, metadata.data(), metadata.size(),
             kRegionHeader + rec.size - up(rec.metadata_size, 8), tmp);
    const fs::path meta_tmp = folder / ".metadata.tmp";
    Partial meta_partial(meta_tmp);
    const Fd meta(open_or_fail(meta_tmp, O_WRONLY | O_CREAT | O_TRUNC));
    write_all(meta.fd, metadata.data(), metadata.size(), 0, meta_tmp);
    sync_and_rename(meta.fd, meta_tmp, folder / ".metadata");
    meta_partial.kept = true;
  }
  sync_and_rename(out.fd, tmp, file);
  partial.kept = true;
  r.kind = PersistReport::Kind::kPersisted;
  r.bytes = rec.size;
  r.detail = file.string();
  r.took = std::chrono::steady_clock::now() - started;
  return r;
}

PersistReport CheckpointPersister::Shared::restore(const Job& job) const {
  const auto started = std::chrono::steady_clock::now();
  const fs::path file =
      dir / fmt::format("step_{}", job.step) / fmt::format("rank_{}.ddpckpt", job.rank);
  const Fd in(open_or_fail(file, O_RDONLY));
  const std::optional<RegionHeader> h = read_header(in.fd, file);
  if (!h || h->slot_of(job.step) != 0 || h->slot_size < h->slots[0].size) {
    errno = EINVAL;
    fail(file.string() + " is not a persisted checkpoint of step " + std::to_string(job.step));
  }
  const SlotRecord& rec = h->slots[0];
  const fs::path region = regions / fmt::format("rank{}", job.local_rank);
  const fs::path tmp = regions / fmt::format("rank{}.restore", job.local_rank);
  Partial partial(tmp);
  const Fd out(open_or_fail(tmp, O_RDWR | O_CREAT | O_TRUNC));
  const uint64_t length = kRegionHeader + 2 * h->slot_size;
  if (const int e = ::posix_fallocate(out.fd, 0, static_cast<off_t>(length)); e != 0) {
    errno = e;
    fail(
        fmt::format("cannot make local rank {}'s region of {} bytes in {} (a container: enlarge "
                    "its /dev/shm with --shm-size)",
                    job.local_rank, length, regions.string()));
  }
  const std::string header = region_header_for(rec, h->slot_size, h->save_micros[0]);
  write_all(out.fd, header.data(), header.size(), 0, tmp);
  const std::optional<uint64_t> sum =
      copy_summing(in.fd, kRegionHeader, out.fd, kRegionHeader, rec.size, file, tmp, stop);
  if (!sum || *sum != rec.checksum) {
    errno = EIO;
    fail(sum ? file.string() + " fails its checksum" : "the agent is stopping");
  }
  fs::rename(tmp, region);
  partial.kept = true;
  PersistReport r;
  r.kind = PersistReport::Kind::kRestored;
  r.bytes = rec.size;
  r.detail = file.string();
  r.took = std::chrono::steady_clock::now() - started;
  return r;
}

CheckpointPersister::CheckpointPersister(boost::asio::io_context& io, fs::path regions_dir,
                                         fs::path dir, int64_t every, Report report)
    : io_(io),
      regions_(std::move(regions_dir)),
      dir_(std::move(dir)),
      every_(std::max<int64_t>(every, 1)),
      timer_(io),
      shared_(std::make_shared<Shared>(io, regions_, dir_, std::move(report))) {
  fs::create_directories(dir_);
  thread_ = std::thread([shared = shared_] { shared->run(); });
}

CheckpointPersister::~CheckpointPersister() {
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
    std::vector<int64_t> steps;
    const fs::path region = regions_ / fmt::format("rank{}", local);
    const int fd = ::open(region.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string bytes(kRegionHeaderRead, '\0');
      const ssize_t got = ::pread(fd, bytes.data(), bytes.size(), 0);
      ::close(fd);
      bytes.resize(got > 0 ? static_cast<size_t>(got) : 0);
      if (const std::optional<RegionHeader> h = parse_region_header(bytes)) {
        for (const SlotRecord& s : h->slots) {
          if (s.state == SlotRecord::kCommitted) steps.push_back(s.step);
        }
      }
    }
    out.push_back(std::move(steps));
  }
  return out;
}

void CheckpointPersister::poll() {
  if (const std::optional<int64_t> step = step_to_persist(held(), last_, every_)) enqueue(*step);
  timer_.expires_after(kPoll);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) poll();
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
    const fs::path file = e.path() / fmt::format("rank_{}.ddpckpt", rank);
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::string bytes(kRegionHeaderRead, '\0');
    const ssize_t got = ::pread(fd, bytes.data(), bytes.size(), 0);
    ::close(fd);
    bytes.resize(got > 0 ? static_cast<size_t>(got) : 0);
    const std::optional<RegionHeader> h = parse_region_header(bytes);
    if (h && h->slots[0].state == SlotRecord::kCommitted && h->slots[0].world_size == world_size &&
        name == fmt::format("step_{}", h->slots[0].step)) {
      steps.push_back(h->slots[0].step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
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
