#pragma once
// Whether a node's watch of the job's keys keeps up with the member it is open on, decided from
// revisions alone (the I/O is the job store's). A watch can stay open and silent on a member that
// still serves (a stream a middlebox stopped relaying, a member whose watch stalled), and a node
// that writes nothing would never learn of it.
//
// After each renewal the watch's member answered (etcd puts the member's revision in the answer's
// header): when the watch has not reached, a renewal later, the revision the member had then (a
// change still on its way is not looked into), the job store ranges the job's keys for the newest
// one's revision and their count. A newer key than the watch brought, or another count than it
// holds (a deletion), is a lag: the watch must reach that revision (or pass its own, for a
// deletion) within a heartbeat timeout, or it moves. A range that finds the watch in step (other
// jobs' changes on a shared etcd move its revision) marks the job quiet through the range's
// revision, and the ranges back off, doubling up to kLongestRangePause apart: etcd reads every job
// key for one. A range that fails waits for the pause too.
#include <chrono>
#include <cstdint>
#include <optional>

namespace ddprun::rendezvous::etcd {

class WatchCheck {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kLongestRangePause{60};

  explicit WatchCheck(std::chrono::milliseconds heartbeat_timeout)
      : heartbeat_(heartbeat_timeout), range_pause_(heartbeat_timeout) {}

  enum class Next { kNothing, kRange, kMove };
  // A renewal the watch's member answered at `member_revision`, the watch having brought the
  // job's changes up to `seen`. kRange: range the job's keys and say what it found (found() or
  // failed()); kMove: the watch is left behind (lag() says how): move it, then reset().
  Next renewed(int64_t member_revision, int64_t seen, Clock::time_point now);

  // What a range found: the newest job key's revision (0: none), how many job keys, etcd's
  // revision then (0: unknown); the watch had brought `seen` and holds `held` keys now.
  void found(int64_t newest, int64_t keys, int64_t as_of, int64_t seen, int64_t held,
             Clock::time_point now);
  void failed(Clock::time_point now);
  // The watch moved, or opens again: what was known of it no longer holds.
  void reset();

  struct Lag {
    Clock::time_point since;
    int64_t target = 0;  // the revision the watch is to reach
    int64_t keys = 0;    // what the range found: how many job keys
    int64_t newest = 0;  // and the newest one's revision
  };
  const std::optional<Lag>& lag() const { return lag_; }
  std::chrono::milliseconds range_pause() const { return range_pause_; }

 private:
  std::chrono::milliseconds heartbeat_;
  std::optional<Lag> lag_;
  std::optional<int64_t> member_ahead_;  // the member's revision at a renewal ahead of the watch
  int64_t quiet_through_ = 0;            // no job change unseen through this revision
  Clock::time_point next_range_{};
  std::chrono::milliseconds range_pause_;
};

}  // namespace ddprun::rendezvous::etcd
