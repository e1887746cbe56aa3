#pragma once
// A node's checkpoints copied to its peer while the workers run, the same steps on every node.
//
// The job copies one step per window of `stride` steps (a power of two, the same on every node):
// the first step saved in each window [k * stride, (k + 1) * stride). Every rank saves the same
// steps, so every node picks the same ones. The agent polls its regions' headers (every 20 ms)
// and, once every local rank has committed a window's first step, stages it: a copy at memory
// speed into the regions' folder ("kept", PeerService::stage) before the worker's saves reuse the
// slot. Where it cannot tell that a step is its window's first (it missed a save), or the slot
// is gone, or a copy is still on its way (the stride is too narrow: the copy's end widens it), it
// skips the window rather than pick a step the other nodes did not. A window's step kept already
// (a round's restored step, staged in the round before) is sent as it is. Where the workers
// stop saving (a pause, a hang, the last step: no new step for 2 s and four times the last gap
// between saves), their newest step is staged too: every node's workers stopped at the same one.
//
// The newest staged step goes to the round's peer node (node k's is node k+1 mod n) in the
// background: a worker never waits for it. A copy that falls behind sends the newest staged step
// when it is done, so the step last copied (the node's safe step) lags. The node keeps its two
// newest windows' steps (and the step the workers stopped at, and the one being sent), and every
// step another node of the round asks it to keep: a node whose safe step is older than the window
// before its newest save (its copies fell behind, or fail), asks every node to keep that step
// (through the round's CopyBoard). So a peer's copy of a lost node is of a step every surviving
// node kept too, and the round after the loss restores it everywhere. A step that leaves a node's
// two newest windows is dropped only where the board, read kAskedWithin or more after it left,
// does not ask for it: the node that asks saw the save that made the step old at the same time
// (the workers save in step), and has said so by then (its next poll and the store's push to the
// others). It asks with the narrowest stride the job had since its safe step last advanced (a
// node that narrowed first drops sooner), and keeps asking for a step until its safe step
// advances, whatever the stride does meanwhile. Between rounds (stop() to watch()) nothing is
// staged or dropped. A worker's request for room (below) drops kept steps even where asked for.
//
// The stride starts at 1 (every step). Each copy sets this node's wish: the smallest power of two
// above the steps the workers saved while it ran (from its step's save to its end); the agent
// publishes a wish that changed through the board and every node follows the widest wish now, so
// the stride narrows again once copies are quick. Powers of two keep nodes that switch a moment
// apart on common steps (a wider stride's steps are the narrower's). A stage the worker's saves
// overtook (it reused the slot first) doubles the wish too.
//
// Copies that fall behind say so: once the safe step has not advanced while the workers saved
// four windows' worth of steps and a copy failed meanwhile (a peer that refuses, cannot be reached
// or stalls; not a copy that is merely slower than the stride, which widens it), on_behind() hears
// it, once, and again once the safe step moves.
//
// A worker's save comes before any copy: where one asks for room in the node's budget
// (room_request.hpp), the copies held for peers go first, the oldest first, then the steps kept
// for the peer (never the one being sent), each with the copies held for peers as links to it;
// on_room() hears what was freed.
// Private to the agent.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "checkpoint/peer_service.hpp"

namespace ddprun::agent {

// Where a round's nodes agree on the stride and ask each other to keep a step.
class CopyBoard {
 public:
  virtual ~CopyBoard() = default;
  struct Said {
    int64_t stride = 1;           // the stride this node's copies need now
    std::optional<int64_t> keep;  // the step this node asks every node to keep (none: nothing)
    bool operator==(const Said&) const = default;
  };
  // Tells the other nodes `said` (replacing what this one said before); false where the store
  // did not take it (said once in the log until it takes one again). Never throws.
  virtual boost::asio::awaitable<bool> say(Said said) = 0;
  struct Read {
    int64_t widest = 1;         // the widest stride the round's nodes need now (1: none said)
    std::vector<int64_t> keep;  // every step a node asks to keep, in order
  };
  // What the round's nodes say now. Never throws.
  virtual boost::asio::awaitable<Read> read() = 0;
};

class CheckpointReplicator {
 public:
  // Each copy's outcome (a stage that failed too), on `io`'s thread, never after the replicator
  // is gone.
  using Report = std::function<void(const TransferReport&, const std::string& peer)>;
  // The copies fell behind (`behind`, with `steps` saved since the safe step last advanced), or
  // caught up again; on `io`'s thread.
  using Behind = std::function<void(bool behind, int64_t steps)>;
  // A worker asked for `wanted` bytes of the budget (room_request.hpp) and the copies dropped for
  // it freed `freed`; on `io`'s thread.
  using Room = std::function<void(uint64_t wanted, uint64_t freed)>;

  // How long room freed for a worker's region is held for it at least (room_request.hpp): as long
  // as a worker waits for its answer at most (ddprun.checkpoint's _ROOM_WAIT_AT_MOST), since it
  // takes the room as soon as it has the budget's lock, which other ranks making their regions
  // (seconds each, for a large one) may hold before it.
  static constexpr std::chrono::milliseconds kGrantHeld{300'000};
  // How often the round's CopyBoard is read (and this node's word on it renewed where it changed).
  static constexpr std::chrono::milliseconds kBoardFollow{500};
  // How long after a save a node whose copies fell behind asks at most for its safe step to be
  // kept: its next poll of its regions (20 ms), then the store's push to the other nodes, with
  // room for agents that wait for a CPU on a loaded node.
  static constexpr std::chrono::milliseconds kAskedWithin{300};

  // `service` outlives the replicator. `grant_held`: kGrantHeld, `asked_within`: kAskedWithin
  // (others in tests; 0: a step that leaves the newest two goes at once where not asked for).
  CheckpointReplicator(boost::asio::io_context& io, PeerService& service,
                       std::filesystem::path regions, Report report,
                       std::chrono::milliseconds grant_held = kGrantHeld,
                       std::chrono::milliseconds asked_within = kAskedWithin);
  ~CheckpointReplicator();
  CheckpointReplicator(const CheckpointReplicator&) = delete;
  CheckpointReplicator& operator=(const CheckpointReplicator&) = delete;

  // The round now running, number `round`: this node is `origin`, with `ranks`; its peer is
  // `peer` (none: the round has one node; nothing is copied then, but the workers' requests for
  // room are still answered: copies held for an earlier round's peers may take it), and the round
  // agrees on the stride and the steps kept on `board`. A new peer gets the newest staged step at
  // once, whatever the last one got.
  void watch(int round, std::string origin, std::vector<RankSlot> ranks,
             std::optional<PeerAddress> peer, std::shared_ptr<CopyBoard> board);
  // The round restored `step` (none: nothing) and dropped every step after it, here and at the
  // peer: a step sent or safe beyond it is of an abandoned timeline, no longer at the peer, and
  // counts as neither (a same peer would otherwise not be sent a step up to it again). Before
  // watch().
  void restored(std::optional<int64_t> step);
  // Stops staging, sending and dropping until the next watch() (a round ended: the next one's
  // restore reads the kept steps); the room held for the round's workers is released and their
  // requests for room withdrawn. A stage under way is abandoned (PeerService::abandon_stages: it
  // keeps nothing); a put under way finishes its rank's transfer unheeded.
  void stop();
  // The round's workers begin to stop (a failure here or elsewhere, a node that left or joined, a
  // hang, a signal): the copies stop as in stop(), a stage under way abandoned, but the workers'
  // requests for room are still answered and the room held: a worker may save while it is stopped
  // (in its SIGTERM handler) into a region that grows. stop() follows once they ended.
  void interrupt();
  // The step every local rank's copy is on the peer of (none yet this round).
  std::optional<int64_t> safe_step() const { return safe_; }
  // The newest step every local rank holds locally (none: no checkpoint yet).
  std::optional<int64_t> newest_local() const { return newest_; }
  // The job's stride now, and the one this node's copies need.
  int64_t stride() const { return stride_; }
  // The last stage's time (a copy of every local rank's slot at memory speed), and the last put's
  // (to the peer: sent, or held by it already); none yet.
  std::optional<double> last_stage_seconds() const { return last_stage_; }
  std::optional<double> last_put_seconds() const { return last_put_; }
  int64_t wish() const { return wish_; }
  // Where copies go: "host:port", or "" with no peer.
  std::string peer() const;
  void on_behind(Behind behind) { behind_report_ = std::move(behind); }
  void on_room(Room room) { room_report_ = std::move(room); }
  // Whether the copies are behind now (see on_behind).
  bool behind() const { return behind_; }
  // The steps the round's nodes ask every node to keep (their safe steps, where their copies fell
  // behind), as last read; and the one this node asks for.
  const std::vector<int64_t>& asked() const { return asked_; }
  std::optional<int64_t> asks() const { return told_ ? told_->keep : std::nullopt; }

 private:
  void poll();
  // Every local rank's request for room answered (answer_room).
  void make_room();
  // Local rank `local_rank`'s request answered: the copies held for peers dropped, the oldest
  // first, then the steps kept for the peer (never the one being sent), until it has the room; the
  // room held for the worker until it takes it, grant_held passes, or the round ends.
  void answer_room(int local_rank);
  // Room held for the workers of a round that ended released, their requests withdrawn.
  void release_grants();
  // No stage, copy or board of this round goes on (stop(), interrupt()).
  void halt_copies();
  // Whether the safe step kept up with the steps saved since it last advanced.
  void note_progress();
  // Reads every local rank's region header; false where a rank has no checkpoint.
  bool read_regions();
  // The window's first step where every rank holds it and it is known to be the first.
  std::optional<int64_t> window_first(int64_t window) const;
  void stage(int64_t step);
  void send_newest();
  void drop_old_kept();
  // The step this node asks every node to keep now (CopyBoard::Said::keep).
  std::optional<int64_t> step_to_keep() const;
  // Publishes what this node says when it changed and reads what the round's nodes say, every
  // kBoardFollow (at once where step_to_keep() changed); then drops what may go.
  boost::asio::awaitable<void> follow_board(uint64_t generation, std::shared_ptr<bool> alive);
  std::filesystem::path kept() const { return regions_ / "kept"; }

  struct Held {  // one committed slot of a local rank's region
    int64_t step = 0;
    uint64_t sequence = 0;
  };

  boost::asio::io_context& io_;
  PeerService& service_;
  std::filesystem::path regions_;
  Report report_;
  Behind behind_report_;
  Room room_report_;
  std::map<int, std::chrono::steady_clock::time_point> granted_at_;  // room held, by local rank
  std::chrono::milliseconds grant_held_, asked_within_;
  boost::asio::steady_timer timer_, board_timer_;
  std::string origin_;
  std::vector<RankSlot> ranks_;
  std::optional<PeerAddress> peer_;
  std::shared_ptr<CopyBoard> board_;
  bool following_ = false;      // follow_board() runs for this round
  bool copying_ = false;        // watch() to interrupt() or stop(): the polls stage and send
  std::vector<int64_t> asked_;  // the steps the round's nodes ask to keep, as last read
  std::chrono::steady_clock::time_point read_at_;  // when they were
  // Staged steps out of the two newest windows, and when they left them.
  std::map<int64_t, std::chrono::steady_clock::time_point> left_;
  std::optional<CopyBoard::Said> told_;  // what follow_board() last said (and the board took)
  std::optional<int64_t> tried_keep_;    // ... and last tried to say
  int64_t ask_stride_ = 1;  // the narrowest stride since safe_ last advanced (step_to_keep)
  std::vector<std::vector<Held>> held_;                 // per local rank, now
  std::vector<std::map<uint64_t, int64_t>> sequences_;  // per local rank: the steps of saves seen
  std::optional<int64_t> safe_, newest_, sent_, window_done_, pause_staged_;
  std::optional<int64_t> since_;  // the newest step when the safe step last advanced (any round)
  bool failed_since_ = false;     // a copy or a stage failed since then (not one overtaken)
  bool behind_ = false;
  std::chrono::steady_clock::time_point newest_since_;  // when newest_ was last new
  std::chrono::steady_clock::duration save_gap_{};      // between the last two new steps
  std::vector<int64_t> staged_;                         // kept here, oldest first
  std::optional<int64_t> sending_;
  bool staging_ = false;
  int64_t stride_ = 1, wish_ = 1;
  std::optional<double> last_stage_, last_put_;
  uint64_t generation_ = 0;  // each watch(): what an earlier round's work reports is ignored
  int round_ = 0;            // the round watch() was told of: its copies are sent as of it
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ddprun::agent
