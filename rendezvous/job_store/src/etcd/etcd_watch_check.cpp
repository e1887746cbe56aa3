#include "etcd_watch_check.hpp"

#include <algorithm>

namespace ddprun::rendezvous::etcd {

WatchCheck::Next WatchCheck::renewed(int64_t member_revision, int64_t seen, Clock::time_point now) {
  if (lag_) {
    // A watch that keeps up brings what a range found within milliseconds, however busy the job.
    if (seen >= lag_->target) {
      lag_.reset();
      return Next::kNothing;
    }
    return now - lag_->since >= heartbeat_ ? Next::kMove : Next::kNothing;
  }
  if (member_revision <= std::max(seen, quiet_through_)) {
    member_ahead_.reset();
    return Next::kNothing;
  }
  if (!member_ahead_ || seen >= *member_ahead_) {
    member_ahead_ = member_revision;
    return Next::kNothing;
  }
  return now < next_range_ ? Next::kNothing : Next::kRange;
}

void WatchCheck::found(int64_t newest, int64_t keys, int64_t as_of, int64_t seen, int64_t held,
                       Clock::time_point now) {
  member_ahead_.reset();
  // In step: the watch has brought a change at the range's revision or later (its events come in
  // revision order, and some may have come while the range was asked), or what the range found.
  if ((as_of > 0 && seen >= as_of) || (newest <= seen && keys == held)) {
    quiet_through_ = std::max(quiet_through_, as_of);
    range_pause_ = std::min<std::chrono::milliseconds>(range_pause_ * 2, kLongestRangePause);
    next_range_ = now + range_pause_;
    return;
  }
  range_pause_ = heartbeat_;
  next_range_ = now;
  lag_ = Lag{now, std::max(newest, seen + 1), keys, newest};
}

void WatchCheck::failed(Clock::time_point now) { next_range_ = now + range_pause_; }

void WatchCheck::reset() {
  lag_.reset();
  member_ahead_.reset();
}

}  // namespace ddprun::rendezvous::etcd
