#pragma once
// The memory a spare node holds for the restore it would make in a lost node's place. A fetch
// writes the lost node's slots into pages the kernel gives anew and zeroed, which costs about as
// much as the transfer itself (scripts/bench/peer_fetch.sh); a spare waits with nothing else to
// do. So each node of a round tells the job (topic kRestoreRoomTopic, the job's scope, whenever it
// changed) how large each of its ranks' newest slot is as a file of the persisted layout (what a
// fetch of it writes), and a node waiting as a spare (Rendezvous::on_spare) reads what they said
// and holds, among its spare pages (spare_pages.hpp), files of the sizes of the node whose slots
// take the most, their pages allocated, within the node's checkpoint budget (they count there as
// kept copies). A round's fetch writes over them (PeerService::get); what it leaves of them stays
// as spare pages for the node's next stages, and room for a worker's region drops them first.
// Private to the agent.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "checkpoint/regions.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "logs/event_log.hpp"

namespace ddprun::agent {

inline constexpr const char* kRestoreRoomTopic = "restore_room";

// What a node says: its ranks' file sizes (each slot rounded up to 1 MiB, as a region's are),
// "B1 B2 ..." ("" where none has saved); and back (nullopt: not what a node says, more than 4096
// files, a file over 256 TiB).
std::string room_text(const std::vector<uint64_t>& files);
std::optional<std::vector<uint64_t>> room_from_text(const std::string& text);

// What a spare holds for what the nodes said (what is not a node's saying is skipped): the files
// of the node whose files take the most memory, largest first.
std::vector<uint64_t> room_wanted(const std::vector<std::string>& said);

// What hold_room holds.
struct RoomHeld {
  size_t count = 0;     // the files wanted
  uint64_t wanted = 0;  // their memory
  uint64_t held = 0;    // the memory of the spare files that hold them
  size_t files = 0;     // how many of the files wanted have a spare file
  size_t made = 0;      // of those, made now
  // Where a file could not be made: the node's budget, or the file system, had no room for it.
  std::optional<std::string> short_by;
};

// Makes the spare pages of the node's checkpoint folder `regions` hold a file of each size of
// `files` (file bytes) and nothing else: each has a spare file taking at least its memory, those
// already there kept first (each for one; keep_spares_for drops the rest), the others made
// (make_spare), the largest first, each only while the node's checkpoints stay within `limit` with
// it. Stops between pieces, and while it waits for the budget's lock, once `stop` is set. Never
// throws.
RoomHeld hold_room(const std::filesystem::path& regions, const std::vector<uint64_t>& files,
                   std::optional<uint64_t> limit, const std::atomic<bool>& stop);

// The node's side of the above, on the agent's io_context: what it says as a node of a round, and
// what it holds as a spare, its files made on a thread of its own.
class RestoreRoom {
 public:
  // `regions` and `events` outlive it.
  RestoreRoom(boost::asio::io_context& io, std::shared_ptr<rendezvous::Rendezvous> rdzv,
              const CheckpointRegions& regions, std::optional<uint64_t> limit, EventLog& events);
  ~RestoreRoom();
  RestoreRoom(const RestoreRoom&) = delete;
  RestoreRoom& operator=(const RestoreRoom&) = delete;

  // A round's workers run here as these local ranks: says their slots' sizes whenever they change
  // (looked at every second).
  void tell(std::vector<int> local_ranks);
  // The node waits as a spare: holds the room the nodes' sayings ask for, looked at every second,
  // and says what it holds (a line, the restore_room_held event) whenever that changed.
  void hold();
  // A round begins on this node: neither says nor holds (what is held stays). Blocks its caller
  // until a file being made is whole or removed (at most one piece of 64 MiB: make_spare; the
  // maker never waits on the budget's lock past a stop).
  void pause();

 private:
  enum class Mode { kIdle, kTelling, kHolding };
  void tick();
  void look_as_spare();
  void run();  // the thread that makes the files
  void report(const RoomHeld& r);

  boost::asio::io_context& io_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  const CheckpointRegions& regions_;
  std::optional<uint64_t> limit_;
  EventLog& events_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for the gathers under way
  Mode mode_ = Mode::kIdle;
  std::vector<int> local_ranks_;
  std::string said_;             // what this node last said
  std::vector<uint64_t> asked_;  // what the thread was last asked to hold
  bool gathering_ = false;       // a look at what the nodes said under way
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> retry_at_;  // when what could not be held is asked again

  std::mutex mutex_;  // the fields below, shared with the thread
  std::condition_variable changed_;
  std::vector<uint64_t> wanted_;
  bool want_new_ = false;  // wanted_ not looked at by the thread yet
  bool busy_ = false;      // the thread is making files
  bool quit_ = false;
  std::atomic<bool> stop_making_{false};
  std::optional<RoomHeld> done_;  // what the thread held last, not reported yet
  std::optional<std::pair<uint64_t, uint64_t>> reported_;  // (held, wanted) said last
  std::thread thread_;
};

}  // namespace ddprun::agent
