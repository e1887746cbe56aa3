#include "output_queue.hpp"

#include <algorithm>
#include <utility>

namespace ddprun::store {

void OutputQueue::append(std::string_view bytes) {
  if (bytes.empty()) return;
  if (!tail_open_) {
    segments_.emplace_back();
    tail_open_ = true;
  }
  segments_.back().owned.append(bytes);
  size_ += bytes.size();
}

void OutputQueue::append(std::shared_ptr<const std::string> value) {
  if (!value || value->empty()) return;
  if (value->size() < kShareFrom) {
    append(std::string_view(*value));
    return;
  }
  size_ += value->size();
  Segment s;
  s.shared = std::move(value);
  segments_.push_back(std::move(s));
  tail_open_ = false;
}

std::vector<boost::asio::const_buffer> OutputQueue::front(size_t max_bytes) {
  std::vector<boost::asio::const_buffer> out;
  size_t taken = 0;
  for (const Segment& s : segments_) {
    if (taken >= max_bytes) break;
    const std::string_view b = s.bytes();
    const size_t n = std::min(b.size(), max_bytes - taken);
    out.emplace_back(b.data(), n);
    taken += n;
    if (&s == &segments_.back()) tail_open_ = false;  // the writer now points into it
  }
  return out;
}

void OutputQueue::consume(size_t n) {
  size_ -= n;
  while (n > 0) {
    Segment& s = segments_.front();
    const size_t left = s.bytes().size();
    if (n < left) {
      s.offset += n;
      return;
    }
    n -= left;
    segments_.pop_front();
  }
  if (segments_.empty()) tail_open_ = false;
}

void OutputQueue::clear() {
  segments_.clear();
  tail_open_ = false;
  size_ = 0;
}

}  // namespace ddprun::store
