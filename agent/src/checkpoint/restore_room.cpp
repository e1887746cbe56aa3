#include "checkpoint/restore_room.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <limits>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <nlohmann/json.hpp>

#include "checkpoint/memory_use.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/spare_pages.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace {

// How often a node looks at its slots' sizes, and a spare at what the nodes said: a store write
// per node only when a size changed; a spare's look reads what the store pushed to it.
constexpr auto kLook = std::chrono::seconds(1);
// How long a spare that could not hold all it was asked for waits before it tries again (what
// took the room meanwhile may have given it back).
constexpr auto kRetryShort = std::chrono::seconds(15);
// How often the maker looks again for the budget's lock, which a worker may hold.
constexpr auto kLockRetry = std::chrono::milliseconds(10);
// The most files a node's saying may name (its local ranks), and the largest file (256 TiB).
constexpr size_t kMostFiles = 4096;
constexpr uint64_t kMostBytes = uint64_t{1} << 48;

uint64_t memory_of(const std::vector<uint64_t>& files) {
  uint64_t bytes = 0;
  for (const uint64_t f : files) bytes += allocated_for(f);
  return bytes;
}

}  // namespace

std::string room_text(const std::vector<uint64_t>& files) {
  return fmt::format("{}", fmt::join(files, " "));
}

std::optional<std::vector<uint64_t>> room_from_text(const std::string& text) {
  std::vector<uint64_t> files;
  if (text.empty()) return files;
  for (size_t at = 0; at <= text.size();) {
    const size_t space = std::min(text.find(' ', at), text.size());
    uint64_t bytes = 0;
    const char* const end = text.data() + space;
    const auto [next, ec] = std::from_chars(text.data() + at, end, bytes);
    if (ec != std::errc() || next != end || files.size() == kMostFiles || bytes > kMostBytes) {
      return std::nullopt;
    }
    files.push_back(bytes);
    at = space + 1;
  }
  return files;
}

std::vector<uint64_t> room_wanted(const std::vector<std::string>& said) {
  std::vector<uint64_t> most;
  for (const std::string& text : said) {
    const std::optional<std::vector<uint64_t>> files = room_from_text(text);
    if (files && memory_of(*files) > memory_of(most)) most = *files;
  }
  std::sort(most.rbegin(), most.rend());
  return most;
}

RoomHeld hold_room(const fs::path& regions, const std::vector<uint64_t>& files,
                   std::optional<uint64_t> limit, const std::atomic<bool>& stop) {
  RoomHeld r;
  try {
    const fs::path kept = regions / "kept";
    const fs::path spares = spares_of(kept);
    std::vector<uint64_t> wanted;
    for (const uint64_t f : files) wanted.push_back(allocated_for(f));
    r.wanted = memory_of(wanted);
    r.count = wanted.size();
    const std::vector<uint64_t> missing = keep_spares_for(spares, wanted, r.held);
    r.files = wanted.size() - missing.size();
    fs::create_directories(kept);
    for (const uint64_t need : missing) {  // (largest first)
      if (stop) break;
      std::optional<BudgetLock> budget;  // until the file is made: a worker's region waits
      if (limit) {
        // Never a wait on the lock that a stop cannot end (a worker stopped holding it).
        while (!stop && !budget.emplace(regions, std::try_to_lock).owns()) {
          budget.reset();
          std::this_thread::sleep_for(kLockRetry);
        }
        if (stop) break;
        if (const uint64_t used = checkpoint_memory(regions).total();
            need > *limit - std::min(used, *limit)) {
          r.short_by = fmt::format(
              "the node's checkpoints take {} bytes and its budget is {} bytes "
              "(--checkpoint_memory_limit): a file of {} bytes more does not fit",
              used, *limit, need);
          break;
        }
      }
      if (!make_spare(spares, kept / ".room.tmp", need, stop)) {
        if (!stop) {
          r.short_by = fmt::format(
              "the file system holding {} has not {} bytes free beside a twentieth of its size",
              regions.string(), need);
        }
        break;
      }
      r.held += need;
      ++r.files;
      ++r.made;
    }
  } catch (const std::exception& e) {
    r.short_by = e.what();
  }
  return r;
}

RestoreRoom::RestoreRoom(asio::io_context& io, std::shared_ptr<rendezvous::Rendezvous> rdzv,
                         const CheckpointRegions& regions, std::optional<uint64_t> limit,
                         EventLog& events)
    : io_(io),
      rdzv_(std::move(rdzv)),
      regions_(regions),
      limit_(limit),
      events_(events),
      timer_(io) {}

RestoreRoom::~RestoreRoom() {
  *alive_ = false;
  timer_.cancel();
  {
    const std::lock_guard lock(mutex_);
    quit_ = true;
    stop_making_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RestoreRoom::tell(std::vector<int> local_ranks) {
  mode_ = Mode::kTelling;
  local_ranks_ = std::move(local_ranks);
  timer_.cancel();
  tick();
}

void RestoreRoom::hold() {
  if (mode_ == Mode::kHolding) return;
  mode_ = Mode::kHolding;
  asked_.clear();  // a round since the last wait may have used what was held: looked at again
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  timer_.cancel();
  tick();
}

void RestoreRoom::pause() {
  mode_ = Mode::kIdle;
  timer_.cancel();
  std::unique_lock lock(mutex_);
  want_new_ = false;
  stop_making_ = true;
  changed_.wait(lock, [this] { return !busy_; });
  stop_making_ = false;
  done_.reset();
}

void RestoreRoom::tick() {
  if (mode_ == Mode::kTelling) {
    std::vector<uint64_t> files;
    for (const int local : local_ranks_) {
      const std::optional<RegionHeader> h = regions_.header(local);
      const int newest = h ? h->newest_committed() : -1;
      // (Rounded up as a region's slots are, to 1 MiB: a payload that changes by a few bytes
      // between saves is not said again; a fetch gives back what its file does not take.)
      if (newest >= 0) files.push_back(kRegionHeader + file_slot_size(h->slots[newest].size));
    }
    if (std::string text = room_text(files); !files.empty() && text != said_) {
      said_ = text;
      asio::co_spawn(
          io_,
          [this, rdzv = rdzv_, alive = alive_,
           text = std::move(text)]() mutable -> asio::awaitable<void> {
            bool said = true;
            try {
              co_await rdzv->publish(rendezvous::Scope::job(), kRestoreRoomTopic, std::move(text));
            } catch (const std::exception&) {
              said = false;  // the store is gone, or the job ended
            }
            if (!said && *alive) said_.clear();  // said again at the next look
          },
          asio::detached);
    }
  } else if (mode_ == Mode::kHolding) {
    look_as_spare();
  } else {
    return;
  }
  timer_.expires_after(kLook);
  timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (!ec && *alive) tick();
  });
}

void RestoreRoom::look_as_spare() {
  std::optional<RoomHeld> done;
  {
    const std::lock_guard lock(mutex_);
    done = std::exchange(done_, std::nullopt);
  }
  if (done) {
    report(*done);
    // What could not be held is asked again after a while, the sizes unchanged or not.
    retry_at_ = done->short_by ? std::optional(Clock::now() + kRetryShort) : std::nullopt;
  }
  if (retry_at_ && Clock::now() >= *retry_at_) {
    retry_at_.reset();
    asked_.clear();
  }
  if (gathering_) return;  // (the first gather follows the topic in the store first)
  gathering_ = true;
  asio::co_spawn(
      io_,
      [this, rdzv = rdzv_, alive = alive_]() -> asio::awaitable<void> {
        const std::vector<std::string> said =
            co_await rdzv->gather(rendezvous::Scope::job(), kRestoreRoomTopic,
                                  std::numeric_limits<int>::max(), std::chrono::milliseconds(0));
        if (!*alive) co_return;
        gathering_ = false;
        if (mode_ != Mode::kHolding) co_return;
        std::vector<uint64_t> wanted = room_wanted(said);
        if (wanted.empty() || wanted == asked_) co_return;
        asked_ = wanted;
        {
          const std::lock_guard lock(mutex_);
          wanted_ = std::move(wanted);
          want_new_ = true;
        }
        changed_.notify_all();
      },
      asio::detached);
}

void RestoreRoom::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return quit_ || want_new_; });
    if (quit_) return;
    want_new_ = false;
    const std::vector<uint64_t> files = wanted_;
    busy_ = true;
    lock.unlock();
    const RoomHeld held = hold_room(regions_.path(), files, limit_, stop_making_);
    lock.lock();
    busy_ = false;
    if (!stop_making_) done_ = held;
    changed_.notify_all();
  }
}

void RestoreRoom::report(const RoomHeld& r) {
  if (reported_ == std::pair{r.held, r.wanted}) return;
  reported_ = std::pair{r.held, r.wanted};
  constexpr double kMiB = 1 << 20;
  spdlog::info(
      "waiting as a spare: {:.1f} MiB of memory held for a restore in a lost node's place (the "
      "largest node's newest checkpoints: {} of {} file(s), {:.1f} MiB)",
      r.held / kMiB, r.files, r.count, r.wanted / kMiB);
  if (r.short_by) spdlog::warn("waiting as a spare: no more memory held: {}", *r.short_by);
  nlohmann::json fields = {
      {"held", r.held}, {"wanted", r.wanted}, {"files", r.files}, {"made", r.made}};
  fields["short_by"] = r.short_by ? nlohmann::json(*r.short_by) : nlohmann::json(nullptr);
  events_.record("restore_room_held", std::move(fields));
}

}  // namespace ddprun::agent
