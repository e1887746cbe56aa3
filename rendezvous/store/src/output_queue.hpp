#pragma once
// A connection's reply bytes waiting for the socket. Small replies are copied into one growing
// segment; a large stored value is queued by reference (the store's immutable buffer), so a GET of
// a 60 MB value costs no copy on the event loop. The writer takes buffers from the front, which
// stay where they are while it writes (later bytes go into a new segment), and consumes what the
// socket took.
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/buffer.hpp>

namespace ddprun::store {

class OutputQueue {
 public:
  // Values at least this long are queued by reference rather than copied.
  static constexpr size_t kShareFrom = 64 * 1024;

  void append(std::string_view bytes);
  void append(std::shared_ptr<const std::string> value);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Up to `max_bytes` (> 0) from the front, valid until consume() or clear().
  std::vector<boost::asio::const_buffer> front(size_t max_bytes);
  void consume(size_t n);
  void clear();

 private:
  struct Segment {
    std::string owned;
    std::shared_ptr<const std::string> shared;  // when set, the segment's bytes
    size_t offset = 0;                          // bytes already consumed
    std::string_view bytes() const {
      return std::string_view(shared ? *shared : owned).substr(offset);
    }
  };
  std::deque<Segment> segments_;
  bool tail_open_ = false;  // the last segment may still grow: nobody is writing from it
  size_t size_ = 0;
};

}  // namespace ddprun::store
