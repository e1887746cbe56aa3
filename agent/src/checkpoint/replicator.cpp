#include "checkpoint/replicator.hpp"

#include <algorithm>
#include <bit>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "checkpoint/memory_use.hpp"
#include "checkpoint/room_request.hpp"
#include "checkpoint/slot_copy.hpp"
#include "checkpoint/spare_pages.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;

namespace {
constexpr std::chrono::milliseconds kRoomPoll{20};
constexpr std::chrono::seconds kPauseAfter{2};
constexpr int64_t kWidestStride = int64_t{1} << 20;
constexpr size_t kStagedKept = 2;
constexpr size_t kSequencesRemembered = 16;
constexpr int64_t kBehindWindows = 4;

int64_t window_of(int64_t step, int64_t stride) {
  const int64_t q = step / stride;
  return (step % stride < 0 ? q - 1 : q) * stride;
}

}  // namespace

CheckpointReplicator::CheckpointReplicator(asio::io_context& io, PeerService& service,
                                           std::filesystem::path regions, Report report,
                                           std::chrono::milliseconds grant_held,
                                           std::chrono::milliseconds asked_within)
    : io_(io),
      service_(service),
      regions_(std::move(regions)),
      report_(std::move(report)),
      grant_held_(grant_held),
      asked_within_(asked_within),
      timer_(io),
      board_timer_(io) {}

CheckpointReplicator::~CheckpointReplicator() {
  *alive_ = false;
  timer_.cancel();
  board_timer_.cancel();
}

std::string CheckpointReplicator::peer() const {
  return peer_ ? fmt::format("{}:{}", peer_->host, peer_->port) : std::string();
}

void CheckpointReplicator::watch(int round, std::string origin, std::vector<RankSlot> ranks,
                                 std::optional<PeerAddress> peer,
                                 std::shared_ptr<CopyBoard> board) {
  const bool same_peer = peer && peer_ && peer->host == peer_->host && peer->port == peer_->port;
  round_ = round;
  origin_ = std::move(origin);
  ranks_ = std::move(ranks);
  peer_ = std::move(peer);
  board_ = std::move(board);
  ++generation_;
  // A stage or copy of the previous round still under way reports into the void.
  staging_ = false;
  sending_.reset();
  if (!same_peer) {
    safe_.reset();
    sent_.reset();
  }
  held_.assign(ranks_.size(), {});
  sequences_.assign(ranks_.size(), {});
  window_done_.reset();
  pause_staged_.reset();
  following_ = peer_ && board_ && !ranks_.empty();
  copying_ = true;
  asked_.clear();
  read_at_ = {};
  ask_stride_ = stride_;
  tried_keep_.reset();
  left_.clear();
  told_.reset();
  // What an earlier round staged for every rank stays staged.
  staged_.clear();
  if (!ranks_.empty()) {
    for (int64_t s : kept_steps(kept(), ranks_.front().local_rank)) {
      const bool all = std::all_of(ranks_.begin(), ranks_.end(), [&](const RankSlot& r) {
        const std::vector<int64_t> k = kept_steps(kept(), r.local_rank);
        return std::find(k.begin(), k.end(), s) != k.end();
      });
      if (all) staged_.push_back(s);
    }
    std::sort(staged_.begin(), staged_.end());
  }
  timer_.cancel();
  board_timer_.cancel();
  if (ranks_.empty()) return;
  poll();  // (with no peer, for the workers' requests for room alone)
  if (following_) asio::co_spawn(io_, follow_board(generation_, alive_), asio::detached);
}

void CheckpointReplicator::restored(std::optional<int64_t> step) {
  const auto beyond = [&](const std::optional<int64_t>& s) { return s && (!step || *s > *step); };
  if (beyond(sent_)) sent_.reset();
  if (beyond(safe_)) safe_.reset();
}

void CheckpointReplicator::stop() {
  release_grants();  // the round's workers are gone
  halt_copies();
  asked_.clear();  // (of the round that ended; the next one's board says again)
  told_.reset();
  tried_keep_.reset();
}

void CheckpointReplicator::interrupt() {
  halt_copies();
  if (!ranks_.empty()) poll();  // (answering room alone)
}

void CheckpointReplicator::halt_copies() {
  ++generation_;  // (the polls and the board's follower of before end)
  following_ = false;
  copying_ = false;
  service_.abandon_puts();
  service_.abandon_stages();
  staging_ = false;
  sending_.reset();
  timer_.cancel();
  board_timer_.cancel();
}

bool CheckpointReplicator::read_regions() {
  std::optional<int64_t> newest;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const auto h = read_region_header(regions_ / fmt::format("rank{}", ranks_[i].local_rank));
    held_[i].clear();
    if (h) {
      for (const SlotRecord& s : h->slots) {
        if (s.state != SlotRecord::kCommitted) continue;
        held_[i].push_back({s.step, s.sequence});
        sequences_[i][s.sequence] = s.step;
      }
    }
    while (sequences_[i].size() > kSequencesRemembered) sequences_[i].erase(sequences_[i].begin());
    if (held_[i].empty()) return false;  // a rank without a checkpoint: nothing every rank holds
    const int64_t mine =
        std::max_element(held_[i].begin(), held_[i].end(), [](const Held& a, const Held& b) {
          return a.step < b.step;
        })->step;
    newest = newest ? std::min(*newest, mine) : mine;
  }
  newest_ = newest;
  return true;
}

std::optional<int64_t> CheckpointReplicator::window_first(int64_t window) const {
  std::optional<int64_t> first;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    std::optional<Held> in;  // the rank's earliest slot in the window
    for (const Held& h : held_[i]) {
      if (h.step >= window && (!in || h.step < in->step)) in = h;
    }
    if (!in || (first && *first != in->step)) return std::nullopt;
    if (stride_ > 1 && in->sequence > 1) {
      // The first of the window only where the save before it is known to be before the window.
      const auto before = sequences_[i].find(in->sequence - 1);
      if (before == sequences_[i].end() || before->second >= window) return std::nullopt;
    }
    first = in->step;
  }
  return first;
}

void CheckpointReplicator::poll() {
  timer_.expires_after(kRoomPoll);
  // (A completion queued before a stop() cancelled the timer must not poll on: the generation.)
  timer_.async_wait([this, alive = alive_, generation = generation_](boost::system::error_code ec) {
    if (ec || !*alive || generation != generation_) return;
    poll();
  });
  make_room();
  if (!peer_ || !copying_) return;  // copies held for others' earlier rounds may still take room
  const std::optional<int64_t> before = newest_;
  if (!read_regions()) return;
  const auto now = std::chrono::steady_clock::now();
  if (newest_ != before) {
    if (before) save_gap_ = now - newest_since_;
    newest_since_ = now;
  }
  note_progress();
  if (following_ && step_to_keep() != tried_keep_) board_timer_.cancel();  // said at once
  // (Nor while a copy is on its way: a window's step staged then would be the stride's sign of
  // being too narrow, which the copy's end widens, not a step the link can carry.)
  if (staging_ || sending_) return;
  const int64_t window = window_of(*newest_, stride_);
  if (!window_done_ || *window_done_ < window) {
    window_done_ = window;  // staged now, or skipped: the same step as every node's, or none
    if (const std::optional<int64_t> first = window_first(window)) {
      // A step kept already (a round's restored step, which the round before staged) is not
      // copied again at memory speed while the workers start: it goes to the peer as it is.
      if (std::find(staged_.begin(), staged_.end(), *first) != staged_.end()) {
        send_newest();
      } else {
        stage(*first);
      }
      return;
    }
  }
  // The workers stopped saving (a pause, a hang, the job's last step): their newest step is the
  // one every node holds now (they save in step), so it is copied too.
  const bool paused = now - newest_since_ >=
                      std::max<std::chrono::steady_clock::duration>(kPauseAfter, 4 * save_gap_);
  if (paused && pause_staged_ != newest_ &&
      std::find(staged_.begin(), staged_.end(), *newest_) == staged_.end()) {
    pause_staged_ = newest_;
    stage(*newest_);
  }
}

void CheckpointReplicator::make_room() {
  for (const RankSlot& r : ranks_) answer_room(r.local_rank);
}

void CheckpointReplicator::answer_room(int local_rank) {
  const auto granted = granted_at_.find(local_rank);
  const bool stale = granted != granted_at_.end() &&
                     std::chrono::steady_clock::now() - granted->second > grant_held_;
  if (!stale && !room_wanted(regions_, local_rank)) return;
  // Under the budget's lock from the first drop to the answer, so that no copy takes the room
  // meanwhile; taken only where it is free (this is the event loop: a worker holding it may be
  // stopped for a stack dump), else at a later poll. Where the lock file cannot be made the
  // request is answered with nothing held: room held outside the lock could overshoot the budget.
  std::unique_ptr<BudgetLock> budget;
  try {
    budget = std::make_unique<BudgetLock>(regions_, std::try_to_lock);
  } catch (const std::system_error&) {
  }
  if (budget && !budget->owns()) return;
  if (stale) {
    room_grant_released(regions_, local_rank);
    granted_at_.erase(local_rank);
  }
  // Asked again, under the lock: a worker that stopped waiting removed its request under it.
  const std::optional<uint64_t> wanted = room_wanted(regions_, local_rank);
  if (!wanted) return;
  const uint64_t before = checkpoint_memory(regions_).total();
  const auto freed = [&] {
    const uint64_t now = checkpoint_memory(regions_).total();
    return before > now ? before - now : 0;
  };
  drop_spares(spares_of(kept()));  // pages held for the next stage: the worker's save comes first
  if (freed() < *wanted) service_.drop_oldest_copies(*wanted - freed());
  while (freed() < *wanted) {
    const auto oldest =
        std::find_if(staged_.begin(), staged_.end(), [&](int64_t s) { return s != sending_; });
    if (oldest == staged_.end()) break;
    left_.erase(*oldest);
    staged_.erase(oldest);
    for (const RankSlot& r : ranks_) drop_kept(kept(), r.local_rank, staged_, 0);
    // A copy held for a peer as a link to the step dropped is the only name of its memory now.
    const uint64_t now = freed();
    if (now < *wanted) service_.drop_oldest_copies(*wanted - now);
  }
  const uint64_t got = freed();
  room_answered(regions_, local_rank, budget ? std::min(got, *wanted) : 0);
  granted_at_[local_rank] = std::chrono::steady_clock::now();
  budget.reset();
  if (room_report_) room_report_(*wanted, got);
}

void CheckpointReplicator::release_grants() {
  for (const auto& [local_rank, at] : granted_at_) room_grant_released(regions_, local_rank);
  granted_at_.clear();
  // A request left unanswered is of a worker gone or going: answered at the next round's first
  // poll, it would drop copies for nobody.
  for (const RankSlot& r : ranks_) room_withdrawn(regions_, r.local_rank);
}

void CheckpointReplicator::note_progress() {
  if (!since_ || *newest_ < *since_) since_ = newest_;  // (a restore rewound the steps)
  const int64_t steps = *newest_ - *since_;
  // (A copy merely slower than the stride widens the stride, not a sign of trouble.)
  if (behind_ || !failed_since_ || steps < kBehindWindows * stride_) return;
  behind_ = true;  // until the safe step advances
  if (behind_report_) behind_report_(true, steps);
}

void CheckpointReplicator::stage(int64_t step) {
  staging_ = true;
  const uint64_t generation = generation_;
  asio::co_spawn(io_, service_.stage(regions_, ranks_, step, kept()),
                 [this, alive = alive_, generation](std::exception_ptr e, TransferReport r) {
                   if (!*alive || generation != generation_) return;
                   staging_ = false;
                   if (e) return;
                   if (!r.ok) {
                     // Overtaken by the worker's saves: the window's copy needs more steps.
                     if (r.overtaken) wish_ = std::min(kWidestStride, std::max(wish_, 2 * stride_));
                     failed_since_ = failed_since_ || !r.overtaken;
                     report_(r, peer());
                     return;
                   }
                   last_stage_ = r.took.count();
                   staged_.push_back(r.step);
                   std::sort(staged_.begin(), staged_.end());
                   drop_old_kept();
                   send_newest();
                 });
}

void CheckpointReplicator::send_newest() {
  if (sending_ || !peer_ || staged_.empty()) return;
  const int64_t step = staged_.back();
  if (sent_ && step <= *sent_) return;
  sending_ = step;
  sent_ = step;  // (a step that fails is not tried again: the next staged one is)
  const uint64_t generation = generation_;
  asio::co_spawn(
      io_, service_.put(*peer_, origin_, ranks_, step, kept(), round_),
      [this, alive = alive_, generation, peer = peer()](std::exception_ptr e, TransferReport r) {
        if (!*alive || generation != generation_) return;
        sending_.reset();
        if (e) return;
        if (r.ok) {
          last_put_ = r.took.count();
          if (!safe_ || r.step > *safe_) ask_stride_ = stride_;
          safe_ = std::max(safe_.value_or(r.step), r.step);
          since_ = newest_;  // the safe step advanced: steps are counted from here
          failed_since_ = false;
          if (std::exchange(behind_, false) && behind_report_) behind_report_(false, 0);
          // The copy took this many saves, from the step's own to the newest now: the job's
          // stride must be wider than that for every window's step to get across.
          const int64_t took = std::max<int64_t>(0, newest_ ? *newest_ - r.step : 0);
          wish_ = std::min(kWidestStride,
                           static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(took) + 1)));
        }
        if (!r.ok) failed_since_ = true;
        drop_old_kept();
        report_(r, peer);
        send_newest();
      });
}

void CheckpointReplicator::drop_old_kept() {
  // The newest two of the windows' steps, every node's; and the step the workers stopped at.
  std::vector<int64_t> aligned;
  for (int64_t s : staged_) {
    if (s != pause_staged_) aligned.push_back(s);
  }
  std::vector<int64_t> keep(
      aligned.end() - static_cast<std::ptrdiff_t>(std::min(aligned.size(), kStagedKept)),
      aligned.end());
  if (pause_staged_ && std::find(staged_.begin(), staged_.end(), *pause_staged_) != staged_.end()) {
    keep.push_back(*pause_staged_);
  }
  if (sending_ && std::find(keep.begin(), keep.end(), *sending_) == keep.end()) {
    keep.push_back(*sending_);
  }
  // A step out of those goes once the board, read asked_within_ after it left, does not ask for
  // it.
  if (following_) {
    const auto now = std::chrono::steady_clock::now();
    for (int64_t s : staged_) {
      if (std::find(keep.begin(), keep.end(), s) != keep.end()) continue;
      const auto left = left_.try_emplace(s, now).first->second;
      const bool asked = std::find(asked_.begin(), asked_.end(), s) != asked_.end();
      if (asked || (asked_within_.count() > 0 && read_at_ < left + asked_within_)) {
        keep.push_back(s);
      }
    }
    std::erase_if(left_, [&](const auto& l) {
      return std::find(keep.begin(), keep.end(), l.first) == keep.end();
    });
    if (!left_.empty()) board_timer_.cancel();  // (its follower sets its next read by them)
  }
  staged_.erase(std::remove_if(staged_.begin(), staged_.end(),
                               [&](int64_t s) {
                                 return std::find(keep.begin(), keep.end(), s) == keep.end();
                               }),
                staged_.end());
  // Their pages lent to the next stage, up to what it writes; not while a put this replicator no
  // longer follows (an earlier round's, abandoned) may still be sending one of them.
  const uint64_t spares =
      service_.puts_under_way() > (sending_ ? 1 : 0) ? 0 : service_.spare_room();
  for (const RankSlot& r : ranks_) drop_kept(kept(), r.local_rank, keep, spares);
}

std::optional<int64_t> CheckpointReplicator::step_to_keep() const {
  // The safe step, where it is older than the window before the newest save's: the other nodes'
  // two newest windows no longer hold it once they staged that save's (or a copy failed since).
  if (!safe_ || !newest_) return std::nullopt;
  if (asks() == safe_) return safe_;  // asked for: until the safe step advances
  if (failed_since_ || *safe_ < window_of(*newest_, ask_stride_) - ask_stride_) return safe_;
  return std::nullopt;
}

asio::awaitable<void> CheckpointReplicator::follow_board(uint64_t generation,
                                                         std::shared_ptr<bool> alive) {
  std::shared_ptr<CopyBoard> board = board_;
  for (;;) {
    if (!*alive || generation != generation_) co_return;
    const CopyBoard::Said now{wish_, step_to_keep()};
    if (told_ != now && (told_ || now.stride > 1 || now.keep)) {
      tried_keep_ = now.keep;
      const bool said = co_await board->say(now);
      if (!*alive || generation != generation_) co_return;
      if (said) told_ = now;  // (else said again at the next read)
    }
    const CopyBoard::Read read = co_await board->read();
    if (!*alive || generation != generation_) co_return;
    stride_ = std::max(wish_, read.widest);
    ask_stride_ = std::min(ask_stride_, stride_);
    asked_ = read.keep;
    read_at_ = std::chrono::steady_clock::now();
    // (Not while a stage writes into kept/: this round's, or one a round before began.)
    const bool staging = staging_ || service_.staging();
    if (!staging) drop_old_kept();
    // The next read: the period's, or sooner where a step that left waits for it (while a stage
    // runs, its end drops what may go).
    auto next = read_at_ + kBoardFollow;
    for (const auto& [step, left] : left_) {
      const auto due = left + asked_within_;
      if (!staging && due > read_at_ &&
          std::find(asked_.begin(), asked_.end(), step) == asked_.end()) {
        next = std::min(next, due);
      }
    }
    board_timer_.expires_at(std::max(next, read_at_ + kRoomPoll));
    const auto [ec] = co_await board_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;  // cancelled: this node's word changed, or a step left the newest two
  }
}

}  // namespace ddprun::agent
