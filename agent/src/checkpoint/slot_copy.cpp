#include "checkpoint/slot_copy.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "checkpoint/file_io.hpp"
#include "checkpoint/memory_use.hpp"
#include "checkpoint/slot_file.hpp"
#include "checkpoint/slot_mac.hpp"
#include "checkpoint/spare_pages.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace {

constexpr size_t kCopyChunk = 8 << 20;
// What a file's MAC is for: the same for every job holding the token, so that a later job with
// it reads what an earlier one wrote.
constexpr std::string_view kDirMac = "checkpoint_dir";

uint64_t up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

std::optional<RegionHeader> read_header(int fd, const fs::path& name) {
  std::string bytes(kRegionHeaderRead, '\0');
  read_all(fd, bytes.data(), bytes.size(), 0, name);
  return parse_region_header(bytes);
}

// Copies `size` bytes from `in` at `from` to `out` at `to`, returning their CRC (and adding them
// to `mac` where there is one); stops early (nullopt) once `stop` is set.
std::optional<uint64_t> copy_summing(int in, uint64_t from, int out, uint64_t to, uint64_t size,
                                     const fs::path& in_name, const fs::path& out_name,
                                     const std::atomic<bool>& stop, SlotMac* mac = nullptr) {
  std::string buffer(std::min<uint64_t>(size, kCopyChunk), '\0');
  PayloadSum sum;
  for (uint64_t done = 0; done < size; done += buffer.size()) {
    if (stop) return std::nullopt;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - done));
    read_all(in, buffer.data(), n, from + done, in_name);
    sum.add(buffer.data(), n);
    if (mac != nullptr) mac->add(std::string_view(buffer.data(), n));
    write_all(out, buffer.data(), n, to + done, out_name);
    if (n < buffer.size()) break;
  }
  return sum.value();
}

// `size` bytes of `in` at `from` copied into a new file `staged` beside the regions (its room
// reserved first); null when there is no room for it (in the file system, or in the node's
// checkpoint budget `limit` once the spare pages of dropped copies are given back), or `stop` was
// set. The caller checks the bytes against the slot.
std::unique_ptr<Fd> stage_slot(int in, const fs::path& in_name, uint64_t from, uint64_t size,
                               const fs::path& staged, const std::atomic<bool>& stop,
                               std::optional<uint64_t> limit) {
  const fs::path regions = staged.parent_path();
  std::optional<BudgetLock> budget;  // until its room is reserved
  if (limit) {
    budget.emplace(regions);
    const fs::path spares = spares_of(regions / "kept");
    const uint64_t need = allocated_for(size);
    uint64_t used = checkpoint_memory(regions).total();  // a walk of the folder: once, if it fits
    if (used + need > *limit) {  // the spare pages go only where that makes the room
      if (used - std::min(spare_memory(spares), used) + need > *limit) return nullptr;
      drop_spares(spares);
      used = checkpoint_memory(regions).total();
      if (used + need > *limit) return nullptr;
    }
  }
  auto fd = std::make_unique<Fd>(open_or_fail(staged, O_RDWR | O_CREAT | O_TRUNC));
  if (size > 0 && ::posix_fallocate(fd->fd, 0, static_cast<off_t>(size)) != 0) return nullptr;
  budget.reset();
  for (uint64_t done = 0; done < size; done += kCopyChunk) {  // by the kernel where it can
    if (stop) return nullptr;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kCopyChunk, size - done));
    if (!copy_range(in, from + done, fd->fd, done, n, in_name, staged)) {
      return copy_summing(in, from + done, fd->fd, done, size - done, in_name, staged, stop)
                 ? std::move(fd)
                 : nullptr;
    }
  }
  return fd;
}

void sync_and_rename(int fd, const fs::path& from, const fs::path& to) {
  if (::fdatasync(fd) != 0) fail_io("cannot write " + from.string());
  fs::rename(from, to);
}

// Why slot `slot` of the region whose header is `h` (-1: no slot holds the step) is not copied to
// --checkpoint_dir for global rank `rank`; nullopt where it is.
std::optional<std::string> why_not_copied(const std::optional<RegionHeader>& h, int slot,
                                          int rank) {
  if (!h || slot < 0) return "the worker saved twice more before the copy began";
  const SlotRecord& rec = h->slots[slot];
  if (rec.rank >= 0 && rec.rank != rank) {  // a slot of before the ranks moved: not this rank's
    return fmt::format("the slot holds global rank {}'s state, not rank {}'s", rec.rank, rank);
  }
  if (rec.sum_kind != PayloadSumKind::kCrc32) {
    return "the slot was written by an earlier ddprun's worker library (no CRC)";
  }
  if (const SlotRecord& other = h->slots[1 - slot];
      other.state == SlotRecord::kCommitted && other.step == rec.step &&
      other.state_identity() != rec.state_identity()) {
    return fmt::format("step {} is held with two states (saved twice, the state changed between)",
                       rec.step);
  }
  return std::nullopt;
}

}  // namespace

void write_dcp_metadata(int fd, const fs::path& name, const SlotRecord& rec,
                        const fs::path& folder) {
  std::string metadata(rec.metadata_size, '\0');
  read_all(fd, metadata.data(), metadata.size(),
           kRegionHeader + rec.size - up(rec.metadata_size, 8), name);
  const fs::path meta_tmp = folder / ".metadata.tmp";
  Partial meta_partial(meta_tmp);
  const Fd meta(open_or_fail(meta_tmp, O_WRONLY | O_CREAT | O_TRUNC));
  write_all(meta.fd, metadata.data(), metadata.size(), 0, meta_tmp);
  sync_and_rename(meta.fd, meta_tmp, folder / ".metadata");
  meta_partial.kept = true;
}

std::optional<RegionHeader> read_region_header(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string bytes(kRegionHeaderRead, '\0');
  const ssize_t got = ::pread(fd, bytes.data(), bytes.size(), 0);
  ::close(fd);
  bytes.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return parse_region_header(bytes);
}

void for_each_region(const fs::path& regions,
                     const std::function<void(const fs::path&, const RegionHeader&)>& visit) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(regions, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank", 0) != 0 || name.find('.') != std::string::npos) continue;
    if (const std::optional<RegionHeader> h = read_region_header(e.path())) visit(e.path(), *h);
  }
}

PersistReport copy_to_disk(const fs::path& regions, int local_rank, int64_t step,
                           const fs::path& dir, int rank, const std::atomic<bool>& stop,
                           const std::optional<store::Token>& token,
                           std::optional<uint64_t> limit) {
  const auto started = std::chrono::steady_clock::now();
  PersistReport r;
  const fs::path region = regions / fmt::format("rank{}", local_rank);
  const Fd in(open_or_fail(region, O_RDONLY));
  const std::optional<RegionHeader> h = read_header(in.fd, region);
  const int slot = h ? h->slot_of(step) : -1;
  r.kind = PersistReport::Kind::kDropped;
  if (std::optional<std::string> why = why_not_copied(h, slot, rank)) {
    r.detail = std::move(*why);
    return r;
  }
  const SlotRecord rec = h->slots[slot];
  const fs::path folder = dir / fmt::format("step_{}", step);
  const fs::path file = folder / fmt::format("rank_{}.ddpckpt", rank);
  // Persisted before (a failure's copy of a step already there): the same bytes. Another
  // timeline's file of that step is replaced.
  if (const std::optional<RegionHeader> there = read_region_header(file);
      there && there->slots[0].state == SlotRecord::kCommitted && there->slots[0].rank == rank &&
      there->slots[0].size == rec.size && there->slots[0].checksum == rec.checksum) {
    return r;
  }
  fs::create_directories(folder);
  const fs::path tmp = folder / fmt::format(".rank_{}.ddpckpt.tmp", rank);
  const struct FolderIfEmpty {  // a step folder that ends up empty goes (after the partial file)
    const fs::path& path;
    ~FolderIfEmpty() {
      std::error_code ignored;
      if (fs::is_empty(path, ignored)) fs::remove(path, ignored);
    }
  } folder_if_empty{folder};
  const auto slot_unchanged = [&] {
    const std::optional<RegionHeader> now = read_header(in.fd, region);
    return now && now->slot_of(step) == slot && now->slots[slot].sequence == rec.sequence;
  };
  // First into memory beside the regions, at memory speed (the worker may save again soon, and a
  // slot it reuses is lost to the copy), checked; then from there to the disk at its own pace. No
  // room in memory for it: straight from the slot, checked after.
  const uint64_t slot_at = kRegionHeader + static_cast<uint64_t>(slot) * h->slot_size;
  const fs::path staged = regions / fmt::format(".persist.rank{}", local_rank);
  Partial staging(staged);
  std::unique_ptr<Fd> stage = stage_slot(in.fd, region, slot_at, rec.size, staged, stop, limit);
  if (stage && !slot_unchanged()) {
    r.detail = "the worker reused the slot during the copy";
    return r;
  }
  Partial partial(tmp);
  const Fd out(open_or_fail(tmp, O_RDWR | O_CREAT | O_TRUNC));
  const std::string header = region_header_for(rec, file_slot_size(rec.size), h->save_micros[slot]);
  write_all(out.fd, header.data(), header.size(), 0, tmp);
  std::optional<SlotMac> mac;
  if (token) {
    mac.emplace(*token, kDirMac);
    mac->add(header);  // its MAC's bytes still zeros
  }
  SlotMac* const macs = mac ? &*mac : nullptr;
  const std::optional<uint64_t> sum =
      stage
          ? copy_summing(stage->fd, 0, out.fd, kRegionHeader, rec.size, staged, tmp, stop, macs)
          : copy_summing(in.fd, slot_at, out.fd, kRegionHeader, rec.size, region, tmp, stop, macs);
  if (!sum || *sum != rec.checksum || (!stage && !slot_unchanged())) {
    r.detail = sum ? "the worker reused the slot during the copy" : "the agent is stopping";
    return r;
  }
  if (mac) {
    const std::string signature = mac->finish();
    write_all(out.fd, signature.data(), signature.size(), kSlot0MacAt, tmp);
  }
  if (rec.metadata_size > 0) write_dcp_metadata(out.fd, tmp, rec, folder);
  sync_and_rename(out.fd, tmp, file);
  partial.kept = true;
  r.kind = PersistReport::Kind::kPersisted;
  r.bytes = rec.size;
  r.detail = file.string();
  r.took = std::chrono::steady_clock::now() - started;
  return r;
}

PersistReport read_back(const fs::path& dir, int64_t step, int rank, const fs::path& regions,
                        int local_rank, const std::atomic<bool>& stop,
                        const std::optional<store::Token>& token) {
  const auto started = std::chrono::steady_clock::now();
  const fs::path file = dir / fmt::format("step_{}", step) / fmt::format("rank_{}.ddpckpt", rank);
  const Fd in(open_or_fail(file, O_RDONLY));
  const std::optional<RegionHeader> h = read_header(in.fd, file);
  if (!h || h->slot_of(step) != 0 || h->slot_size < h->slots[0].size) {
    errno = EINVAL;
    fail_io(file.string() + " is not a persisted checkpoint of step " + std::to_string(step));
  }
  SlotRecord rec = h->slots[0];
  if (rec.rank < 0) rec.rank = rank;  // a file of the first layout: its path names the rank
  if (rec.rank != rank) {
    errno = EINVAL;
    fail_io(fmt::format("{} holds global rank {}'s state, not rank {}'s", file.string(), rec.rank,
                        rank));
  }
  std::optional<SlotMac> mac;
  std::string theirs;
  if (token) {  // the file's MAC first: nothing of a file without this token's counts
    std::string header(kRegionHeader, '\0');
    read_all(in.fd, header.data(), header.size(), 0, file);
    theirs = header.substr(kSlot0MacAt, SlotMac::kBytes);
    if (theirs == std::string(SlotMac::kBytes, '\0')) {
      errno = EPERM;
      fail_io(file.string() +
              " has no MAC: it was not written by a job holding this job's token "
              "(--rdzv_conf auth_token_file); not restored");
    }
    header.replace(kSlot0MacAt, SlotMac::kBytes, SlotMac::kBytes, '\0');
    mac.emplace(*token, kDirMac);
    mac->add(header);
  }
  SlotFileWriter out(regions / fmt::format("rank{}", local_rank),
                     regions / fmt::format("rank{}.restore", local_rank),
                     region_header_for(rec, h->slot_size, h->save_micros[0]),
                     kRegionHeader + 2 * h->slot_size,
                     fmt::format("local rank {}'s region", local_rank), rec.sum_kind);
  std::string buffer(std::min<uint64_t>(rec.size, kCopyChunk), '\0');
  for (uint64_t done = 0; done < rec.size;) {
    if (stop) {
      errno = ECANCELED;
      fail_io("the agent is stopping");
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), rec.size - done));
    read_all(in.fd, buffer.data(), n, kRegionHeader + done, file);
    out.append(buffer.data(), n);
    if (mac) mac->add(std::string_view(buffer.data(), n));
    done += n;
  }
  if (mac && !mac->matches(theirs)) {
    errno = EPERM;
    fail_io(file.string() +
            " fails its MAC: written under another token than this job's, or altered since; not "
            "restored");
  }
  if (!out.commit(rec.checksum)) {
    errno = EIO;
    fail_io(file.string() + " fails its checksum");
  }
  PersistReport r;
  r.kind = PersistReport::Kind::kRestored;
  r.bytes = rec.size;
  r.detail = file.string();
  r.took = std::chrono::steady_clock::now() - started;
  return r;
}

bool move_back(const fs::path& dir, int64_t step, int rank, const fs::path& regions,
               int local_rank) {
  const fs::path file = dir / fmt::format("step_{}", step) / fmt::format("rank_{}.ddpckpt", rank);
  const Fd fd(open_or_fail(file, O_RDWR));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) fail_io("cannot stat " + file.string());
  if (st.st_nlink != 1) return false;
  const std::optional<RegionHeader> h = read_header(fd.fd, file);
  if (!h || h->slot_of(step) != 0 || h->slots[0].rank != rank ||
      h->slots[0].sum_kind != PayloadSumKind::kCrc32 || h->slot_size < h->slots[0].size) {
    return false;
  }
  const SlotRecord& rec = h->slots[0];
  // From the page the payload ends in: the slot's tail and the whole second slot, which the
  // worker's next save writes through its mapping.
  const uint64_t from = (kRegionHeader + rec.size) / 4096 * 4096;
  const uint64_t end = kRegionHeader + 2 * h->slot_size;
  if (const int e = end > from ? ::posix_fallocate(fd.fd, static_cast<off_t>(from),
                                                   static_cast<off_t>(end - from))
                               : 0;
      e != 0) {
    errno = e;
    fail_io(
        fmt::format("cannot make local rank {}'s region of {} bytes in {} (a container: "
                    "enlarge its /dev/shm with --shm-size)",
                    local_rank, end, regions.string()));
  }
  const std::string header = region_header_for(rec, h->slot_size, h->save_micros[0]);
  write_all(fd.fd, header.data(), header.size(), 0, file);
  fs::rename(file, regions / fmt::format("rank{}", local_rank));
  return true;
}

}  // namespace ddprun::agent
