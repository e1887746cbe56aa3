#include "checkpoint/read_ahead.hpp"

#include <algorithm>
#include <utility>

#include "checkpoint/copy_mac.hpp"
#include "checkpoint/file_io.hpp"

namespace ddprun::agent {

ReadAhead::ReadAhead(int fd, uint64_t offset, uint64_t n, size_t chunk, CopyMac* mac,
                     std::filesystem::path name)
    : fd_(fd),
      offset_(offset),
      n_(n),
      chunk_(std::max<size_t>(chunk, 1)),
      mac_(mac),
      name_(std::move(name)) {
  if (n_ > 0) thread_ = std::thread([this] { run(); });
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReadAhead::run() {
  for (uint64_t done = 0, i = 0; done < n_; ++i) {
    const int b = static_cast<int>(i % 2);
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || (ready_[b] == 0 && held_ != b); });
      if (stop_) return;
    }
    const size_t k = static_cast<size_t>(std::min<uint64_t>(chunk_, n_ - done));
    std::string& buffer = buffers_[b];
    try {
      if (buffer.size() < k) buffer.resize(std::min<uint64_t>(chunk_, n_));
      read_all(fd_, buffer.data(), k, offset_ + done, name_);
      if (mac_ != nullptr) mac_->add(std::string_view(buffer.data(), k));
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    done += k;
    std::lock_guard lock(mutex_);
    ready_[b] = k;
    changed_.notify_all();
  }
}

std::string_view ReadAhead::next() {
  std::unique_lock lock(mutex_);
  held_ = -1;  // the chunk handed out before is sent: its buffer is free
  changed_.notify_all();
  if (handed_ == n_) return {};
  const int b = static_cast<int>(handed_ / chunk_ % 2);  // (every chunk but the last is whole)
  changed_.wait(lock, [&] { return ready_[b] != 0 || error_; });
  if (ready_[b] == 0) std::rethrow_exception(error_);
  const size_t k = std::exchange(ready_[b], 0);
  held_ = b;
  handed_ += k;
  return {buffers_[b].data(), k};
}

}  // namespace ddprun::agent
