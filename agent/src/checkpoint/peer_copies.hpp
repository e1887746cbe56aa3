#pragma once
// The copies of other nodes' checkpoints this node holds for them (peer_service.hpp receives
// them): per origin node and local rank, the newest two complete steps, each a file of the
// persisted layout (region_format.hpp: the slot as slot 0) in a folder of the node's checkpoint
// folder, bounded by --checkpoint_memory_limit together with everything else that folder holds
// (memory_use.hpp). A copy whose bytes this node keeps already (a step of its own, byte for byte
// the same: DDP's state on every node) is a hard link to that kept file, sharing its memory, with
// a record of its own. Thread-safe: written on the peer service's thread, read by the agent's.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/payload_digest.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/slot_file.hpp"

namespace ddprun::agent {

class PeerCopies {
 public:
  struct Copy {
    int64_t step = 0;
    int rank = 0;   // the global rank that saved it
    int world = 0;  // the world size it was saved at
    uint64_t bytes = 0;
    std::filesystem::path file;
    // A linked copy's own record (the file's header is the kept copy's); nullopt: the file's.
    std::optional<SlotRecord> record;
  };

  // Makes `dir` (a folder of the node's checkpoint folder, its parent); removes it, with every
  // copy, when destroyed. `limit`: the node's checkpoint budget.
  PeerCopies(std::filesystem::path dir, std::optional<uint64_t> limit);
  ~PeerCopies();
  PeerCopies(const PeerCopies&) = delete;
  PeerCopies& operator=(const PeerCopies&) = delete;

  // A writer for a new copy of `file_bytes` bytes (header included) of `origin`'s local rank
  // `local_rank`, step `step`, with room made for it: where the limit needs it, the spare pages
  // (spare_pages()) are dropped first, then the older of that rank's two copies (never the
  // newest). Throws std::runtime_error naming the sizes where the limit leaves no room even so
  // (with what the node's checkpoint folder holds besides), std::system_error where /dev/shm has
  // none.
  std::unique_ptr<SlotFileWriter> begin(const std::string& origin, int local_rank, int64_t step,
                                        const std::string& header, uint64_t file_bytes);
  // Which timeline a copy is of: the round whose agents sent it (every node of a round has the
  // same number). Each drop_after() (a round's restore) begins the timeline of its round: a copy
  // sent in an earlier round is of a timeline the job abandoned, whatever its step, whenever its
  // bytes arrive (a put under way as the round restored an earlier step, or whose request reached
  // this node only after its restore). Whether copies sent in `round` are still kept.
  bool current(int round) const;
  // The writer `begin` gave committed its file, sent in round `round`: recorded, and that rank's
  // copies beyond the newest two dropped. False (the file removed, nothing recorded) where that
  // round's copies are no longer current().
  bool committed(const std::string& origin, int local_rank, int rank, int world, int64_t step,
                 uint64_t file_bytes, int round);
  // Records as `origin`'s copy of local rank `local_rank` the slot `record` names (its step, rank
  // and world size) by a hard link to `same`, a file of the persisted layout this node keeps whose
  // payload is that slot's: the same size, CRC and `digest`, checked again once linked. The older
  // copies beyond the newest two dropped, as committed(). False (nothing recorded) where `same` is
  // gone or no longer that, a copy of that rank is being received, or copies sent in `round` are
  // no longer current().
  bool linked(const std::string& origin, int local_rank, const SlotRecord& record,
              const PayloadDigest& digest, const std::filesystem::path& same, int round);
  // The writer `begin` gave was not committed (the transfer failed): its room is given back.
  void abandoned(const std::string& origin, int local_rank);
  // From now on, a copy dropped whose file's name was its last lends its pages to the node's next
  // stage (spare_pages.hpp: held in `spares`, up to `most` bytes in all), unless it was dropped
  // for room.
  void spare_pages(std::filesystem::path spares, uint64_t most);
  // The `most` spare_pages() was last given (0: none yet). Any thread.
  uint64_t spare_room() const;
  // Drops the copies of every origin not in `origins` (nodes that left the job, whose copies the
  // round no longer needs).
  void keep_only(const std::vector<std::string>& origins);
  // Drops every copy of a step after `step` (none: every copy): what round `round`, restoring
  // `step`, leaves behind is of a timeline the job abandoned. Copies sent before `round` are no
  // longer current().
  void drop_after(std::optional<int64_t> step, int round);
  // Drops copies, the oldest step first (of any origin and rank), until `bytes` are freed or
  // none is left: room a worker's own save needs (the node's budget serves the node's regions
  // before any copy). A linked copy whose kept file remains frees nothing and stays. Returns the
  // bytes freed.
  uint64_t drop_oldest(uint64_t bytes);
  // Every copy held.
  std::vector<Copy> all() const;
  // The copy of `origin`'s local rank `local_rank` at `step`; nullopt: none.
  std::optional<Copy> find(const std::string& origin, int local_rank, int64_t step) const;
  // Per origin, per local rank (0 to the highest held), the steps held, oldest first.
  std::map<std::string, std::vector<std::vector<int64_t>>> steps() const;
  uint64_t bytes() const;

 private:
  using Key = std::pair<std::string, int>;
  std::filesystem::path file_for(const std::string& origin, int local_rank, int64_t step) const;
  // Drops copies[i]. For room (`for_room`): its file removed, returns the bytes of memory that
  // freed; else its pages may go to the spares (spare_pages()), returns 0.
  uint64_t drop(std::vector<Copy>& copies, size_t i, bool for_room = false);
  // Adds `copy`, replacing one of the same step; drops that rank's copies beyond the newest two.
  void add_copy(std::vector<Copy>& copies, Copy copy);

  std::filesystem::path dir_;
  std::optional<uint64_t> limit_;
  mutable std::mutex mutex_;
  std::map<Key, std::vector<Copy>> held_;  // oldest first
  std::map<Key, uint64_t> reserved_;       // copies being received
  uint64_t bytes_ = 0;
  int timeline_ = 0;  // the round whose copies are current (and later rounds')
  std::filesystem::path spares_;
  uint64_t spares_most_ = 0;  // none until spare_pages()
};

}  // namespace ddprun::agent
