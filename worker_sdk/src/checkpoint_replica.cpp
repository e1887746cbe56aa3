#include "checkpoint_replica.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "ddp/errors.hpp"

namespace ddp::checkpoint {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kPlainMagic[8] = {'D', 'D', 'P', 'C', 'X', 'X', '1', '\0'};
constexpr char kReplicaMagic[8] = {'D', 'D', 'P', 'C', 'X', 'X', '2', '\0'};
constexpr auto kStartWait = std::chrono::seconds(30);    // for the holder to begin the same save
constexpr auto kCommitWait = std::chrono::seconds(600);  // and then to commit it
constexpr std::chrono::microseconds kFirstPoll(500), kLongestPoll(10'000);  // between looks

// A region file's header and slots, read with pread (the holder's: it may be replaced or grown
// while a referrer looks).
class Peek {
 public:
  explicit Peek(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ >= 0)
      valid_ = ::pread(fd_, head_, sizeof head_, 0) == sizeof head_ &&
               std::memcmp(head_, kMagic, 8) == 0;
  }
  ~Peek() {
    if (fd_ >= 0) ::close(fd_);
  }
  Peek(const Peek&) = delete;
  Peek& operator=(const Peek&) = delete;

  bool exists() const { return fd_ >= 0; }
  bool valid() const { return valid_; }
  Record record(int slot) const { return at<Record>(64 + 64 * slot); }
  int64_t rank(int slot) const { return at<int64_t>(kRankAt + 8 * slot); }
  uint64_t run(int slot) const { return at<uint64_t>(kRunAt + 8 * slot); }
  // The slot's structure, or nullopt where the slot changed while it was read.
  std::optional<Layout> layout(int slot) const {
    const Record rec = record(slot);
    std::vector<std::byte> bytes(std::min<uint64_t>(rec.structure_size, rec.size));
    const auto at = static_cast<off_t>(kHeader + slot * this->at<uint64_t>(8));
    if (::pread(fd_, bytes.data(), bytes.size(), at) != static_cast<ssize_t>(bytes.size())) {
      return std::nullopt;
    }
    Record now{};
    if (::pread(fd_, &now, sizeof now, 64 + 64 * slot) != sizeof now ||
        std::memcmp(&now, &rec, sizeof now) != 0) {
      return std::nullopt;
    }
    return Layout::read(bytes.data(), bytes.size());
  }

 private:
  template <typename T>
  T at(size_t offset) const {
    T v;
    std::memcpy(&v, head_ + offset, sizeof v);
    return v;
  }
  int fd_;
  bool valid_ = false;
  char head_[kHeader] = {};
};

}  // namespace

size_t Layout::structure_size() const {
  const size_t words = 2 + sizes.size() + (role == Role::kPlain ? 0 : 4 + crcs.size());
  return up(8 * words, kAlign);
}

size_t Layout::payload_size() const {
  size_t n = structure_size();
  for (size_t i = first_stored(); i < sizes.size(); ++i) n += up(sizes[i], kAlign);
  return n;
}

void Layout::write(std::byte* out) const {
  std::memset(out, 0, structure_size());
  std::memcpy(out, role == Role::kPlain ? kPlainMagic : kReplicaMagic, 8);
  std::vector<uint64_t> words = {sizes.size()};
  words.insert(words.end(), sizes.begin(), sizes.end());
  if (role != Role::kPlain) {
    words.insert(words.end(),
                 {static_cast<uint64_t>(role), replicated, ordinal, static_cast<uint64_t>(holder)});
    words.insert(words.end(), crcs.begin(), crcs.end());
  }
  std::memcpy(out + 8, words.data(), 8 * words.size());
}

std::optional<Layout> Layout::read(const std::byte* in, size_t size) {
  auto word = [&](size_t i) -> std::optional<uint64_t> {
    if (8 * (i + 1) > size) return std::nullopt;
    uint64_t v;
    std::memcpy(&v, in + 8 * i, 8);
    return v;
  };
  Layout l;
  const bool replica = size >= 8 && std::memcmp(in, kReplicaMagic, 8) == 0;
  if (size < 16 || (!replica && std::memcmp(in, kPlainMagic, 8) != 0)) return std::nullopt;
  const uint64_t count = *word(1);
  if (count > size / 8) return std::nullopt;
  for (size_t i = 0; i < count; ++i) {
    const auto s = word(2 + i);
    if (!s) return std::nullopt;
    l.sizes.push_back(*s);
  }
  if (!replica) return l;
  const size_t at = 2 + count;
  const auto role = word(at), n = word(at + 1), ordinal = word(at + 2), holder = word(at + 3);
  if (!holder || (*role != 1 && *role != 2) || *n == 0 || *n > count) return std::nullopt;
  l.role = static_cast<Role>(*role);
  l.replicated = *n;
  l.ordinal = *ordinal;
  l.holder = static_cast<int64_t>(*holder);
  for (size_t i = 0; i < *n; ++i) {
    const auto crc = word(at + 4 + i);
    if (!crc) return std::nullopt;
    l.crcs.push_back(*crc);
  }
  return l;
}

std::variant<Layout, std::string> wait_for_holder(const std::string& folder, int64_t step,
                                                  uint64_t run, uint64_t world, int64_t holder,
                                                  uint64_t ordinal) {
  const std::string path = folder + "/rank0";
  const auto started = Clock::now();
  std::optional<Clock::time_point> writing_since;
  auto poll = std::chrono::duration_cast<Clock::duration>(kFirstPoll);
  for (;;) {
    bool begun = fs::exists(path + ".new");  // a grown region being made
    for (const std::string& name : {path, path + ".new"}) {
      const Peek peek(name);
      if (!peek.exists()) continue;
      if (!peek.valid()) {  // made, its header not written yet
        begun = true;
        continue;
      }
      std::vector<uint64_t> ahead;
      for (int s : {0, 1}) {
        const Record rec = peek.record(s);
        if (rec.step != step || peek.rank(s) != holder || peek.run(s) != run) continue;
        if (rec.state == kWriting) begun = true;
        if (rec.state != kCommitted || rec.world_size != world) continue;
        const std::optional<Layout> theirs = peek.layout(s);
        if (!theirs) continue;  // overwritten while read: looked at again
        if (theirs->role != Layout::Role::kHolder) {
          return fmt::format("local rank 0 saved step {} without replicated buffers", step);
        }
        if (theirs->ordinal == ordinal) return *theirs;
        if (theirs->ordinal > ordinal) ahead.push_back(theirs->ordinal);
      }
      if (!ahead.empty()) {
        return fmt::format("local rank 0 is {} save(s) ahead of this rank",
                           *std::min_element(ahead.begin(), ahead.end()) - ordinal);
      }
      for (int s : {0, 1}) {
        const Record rec = peek.record(s);
        if (name == path && rec.state == kCommitted && rec.step > step) {
          return fmt::format("local rank 0 has saved step {} and not step {}", rec.step, step);
        }
      }
    }
    const auto now = Clock::now();
    if (begun && !writing_since) writing_since = now;
    if (!writing_since && now - started > kStartWait) {
      return fmt::format("local rank 0 did not begin saving step {} within {} s", step,
                         kStartWait.count());
    }
    if (writing_since && now - *writing_since > kCommitWait) {
      return fmt::format("local rank 0's save of step {} took over {} s", step,
                         kCommitWait.count());
    }
    std::this_thread::sleep_for(poll);
    poll = std::min<Clock::duration>(poll * 2, kLongestPoll);
  }
}

HolderSlot::HolderSlot(const std::string& folder, int64_t step, uint64_t run, uint64_t world,
                       const Layout& ref) {
  std::error_code ec;
  std::vector<fs::path> regions;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 4 && name.compare(0, 4, "rank") == 0 &&
        std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      regions.push_back(e.path());
    }
  }
  std::sort(regions.begin(), regions.end());
  for (const fs::path& path : regions) {
    std::unique_ptr<Region> region = existing_region(path.string(), false);
    if (region == nullptr) continue;
    for (int s : {0, 1}) {
      const Record rec = *region->record(s);
      if (rec.state != kCommitted || rec.step != step || region->rank(s) != ref.holder ||
          region->run(s) != run || rec.world_size != world || rec.size > region->slot_size) {
        continue;
      }
      const std::byte* payload = region->payload(s);
      const std::optional<Layout> theirs = Layout::read(payload, rec.structure_size);
      if (!theirs || theirs->role != Layout::Role::kHolder || theirs->ordinal != ref.ordinal ||
          theirs->replicated != ref.replicated ||
          !std::equal(ref.sizes.begin(), ref.sizes.begin() + ref.replicated,
                      theirs->sizes.begin())) {
        continue;
      }
      std::vector<size_t> offsets;
      size_t at = 0;
      bool intact = rec.structure_size + at <= rec.size;
      for (size_t i = 0; intact && i < ref.replicated; ++i) {
        offsets.push_back(at);
        intact = rec.structure_size + at + up(ref.sizes[i], kAlign) <= rec.size &&
                 tile_crc(payload + rec.structure_size + at, ref.sizes[i]) == ref.crcs[i];
        at += up(ref.sizes[i], kAlign);
      }
      if (!intact || std::memcmp(region->record(s), &rec, sizeof rec) != 0) continue;
      region_ = std::move(region);
      slot_ = s;
      seen_ = rec;
      tiles_ = payload + rec.structure_size;
      offsets_ = std::move(offsets);
      return;
    }
  }
  throw CheckpointError(fmt::format(
      "checkpoint: step {}: this rank's replicated buffers are held by global rank {}'s slot, "
      "which this node's regions do not hold intact ({}): refused",
      step, ref.holder, folder));
}

bool HolderSlot::still_there() const {
  return std::memcmp(region_->record(slot_), &seen_, sizeof seen_) == 0;
}

}  // namespace ddp::checkpoint
