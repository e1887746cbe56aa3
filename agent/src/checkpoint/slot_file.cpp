#include "checkpoint/slot_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "checkpoint/cold_copy.hpp"
#include "checkpoint/memory_use.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace {

bool over_spare(FileRoom room) {
  return room == FileRoom::kOverSpare || room == FileRoom::kRestoreOverSpare;
}

}  // namespace

std::optional<SlotReader> SlotReader::open(const fs::path& region, int64_t step) {
  SlotReader r(region, open_or_fail(region, O_RDONLY));
  std::string bytes(kRegionHeaderRead, '\0');
  read_all(r.fd_.fd, bytes.data(), bytes.size(), 0, region);
  const std::optional<RegionHeader> h = parse_region_header(bytes);
  r.slot_ = h ? h->slot_of(step) : -1;
  if (r.slot_ < 0) return std::nullopt;
  r.record_ = h->slots[r.slot_];
  r.save_micros_ = h->save_micros[r.slot_];
  r.slot_at_ = kRegionHeader + static_cast<uint64_t>(r.slot_) * h->slot_size;
  return r;
}

std::string SlotReader::file_header(uint64_t slot_size) const {
  return region_header_for(record_, slot_size, save_micros_);
}

void SlotReader::copy_to(SlotFileWriter& out, uint64_t at, size_t n, char* scratch) const {
  out.append_from(fd_.fd, slot_at_ + at, n, region_, scratch);
}

bool SlotReader::unchanged() const {
  std::string bytes(kRegionHeaderRead, '\0');
  read_all(fd_.fd, bytes.data(), bytes.size(), 0, region_);
  const std::optional<RegionHeader> now = parse_region_header(bytes);
  return now && now->slot_of(record_.step) == slot_ &&
         now->slots[slot_].sequence == record_.sequence;
}

SlotFileWriter::SlotFileWriter(fs::path path, fs::path tmp, const std::string& header,
                               uint64_t reserve, const std::string& what, PayloadSumKind arriving,
                               FileRoom room)
    : path_(std::move(path)),
      partial_(tmp),
      fd_(open_or_fail(tmp, O_RDWR | O_CREAT | (over_spare(room) ? 0 : O_TRUNC))) {
  if (arriving != PayloadSumKind::kCrc32) arriving_.emplace(arriving);
  int e = 0;
  if (room == FileRoom::kAsWritten) {
    struct statvfs fs {};
    if (::fstatvfs(fd_.fd, &fs) != 0) {
      e = errno;
    } else if (static_cast<unsigned __int128>(fs.f_bavail) * fs.f_frsize < reserve) {
      e = ENOSPC;
    }
  } else if (over_spare(room)) {
    // (A spare larger than the reserve gives back the rest; one short of it, or with holes, has
    // its missing pages reserved. Walking pages already there costs a tenth of a copy.)
    struct stat st {};
    if (::ftruncate(fd_.fd, static_cast<off_t>(reserve)) != 0 || ::fstat(fd_.fd, &st) != 0) {
      e = errno;
    } else if (static_cast<uint64_t>(st.st_blocks) * 512 < allocated_for(reserve)) {
      e = ::posix_fallocate(fd_.fd, 0, static_cast<off_t>(reserve));
    }
  } else {
    e = ::posix_fallocate(fd_.fd, 0, static_cast<off_t>(reserve));
  }
  if (e != 0) {
    errno = e;
    fail_io(
        fmt::format("cannot make {} of {} bytes in {} (a container: enlarge its /dev/shm with "
                    "--shm-size)",
                    what, reserve, tmp.parent_path().string()));
  }
  write_all(fd_.fd, header.data(), header.size(), 0, tmp);
  if (room == FileRoom::kOverSpare) pages_.emplace(fd_.fd, reserve);  // (its room made above)
}

void SlotFileWriter::record_digest() { digest_ = std::make_unique<DigestSum>(); }

void SlotFileWriter::append(const char* p, size_t n) {
  const uint64_t to = kRegionHeader + written_;
  if (stores_into_pages() && to + n <= pages_->size()) {
    cold_copy(pages_->get() + to, p, n);
  } else {
    write_all(fd_.fd, p, n, to, partial_.path);
  }
  sum(p, n);
}

void SlotFileWriter::sum(const char* p, size_t n) {
  crc_.add(p, n);
  if (arriving_) arriving_->add(p, n);
  if (digest_) digest_->add(p, n);
  written_ += n;
}

void SlotFileWriter::append_from(int in, uint64_t at, size_t n, const fs::path& in_name,
                                 char* scratch) {
  read_all(in, scratch, n, at, in_name);
  append(scratch, n);
}

bool SlotFileWriter::commit(uint64_t checksum) {
  if ((arriving_ ? arriving_->value() : crc_.value()) != checksum) return false;
  if (arriving_) {  // a file of a layout before: its header is the current one's, with the CRC
    const uint64_t crc = crc_.value();
    write_all(fd_.fd, reinterpret_cast<const char*>(&crc), sizeof crc, kSlot0ChecksumAt,
              partial_.path);
  }
  if (digest_) {
    const std::string field = digest_field(digest_->value());
    write_all(fd_.fd, field.data(), field.size(), kSlot0DigestAt, partial_.path);
  }
  fs::rename(partial_.path, path_);
  partial_.kept = true;
  return true;
}

fs::path SlotFileWriter::release() {
  pages_.reset();
  partial_.kept = true;
  return partial_.path;
}

AppendBehind::AppendBehind(SlotFileWriter& out, size_t chunk)
    : out_(out), buffers_{std::string(chunk, '\0'), std::string(chunk, '\0')} {
  thread_ = std::thread([this] { run(); });
}

AppendBehind::~AppendBehind() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void AppendBehind::wait_idle(std::unique_lock<std::mutex>& lock) {
  changed_.wait(lock, [&] { return !job_; });
  if (error_) std::rethrow_exception(error_);
}

void AppendBehind::append(size_t n) {
  std::unique_lock lock(mutex_);
  wait_idle(lock);
  job_.emplace(next_, n);
  next_ ^= 1;
  changed_.notify_all();
}

void AppendBehind::finish() {
  std::unique_lock lock(mutex_);
  wait_idle(lock);
}

void AppendBehind::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || job_; });
    if (!job_) return;  // stopped, nothing handed
    const auto [index, n] = *job_;
    lock.unlock();
    std::exception_ptr error;
    try {
      out_.append(buffers_[index].data(), n);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    job_.reset();
    changed_.notify_all();
  }
}

}  // namespace ddprun::agent
