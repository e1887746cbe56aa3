#pragma once
// --checkpoint_dir: the node's in-memory checkpoints written to DIR/step_<N>/rank_<RANK>.ddpckpt
// (region_format.hpp: the slot as slot 0 of a file of the region layout) in the background, and
// read back into the regions after a restart from nothing. The agent polls its regions' headers;
// the copies run on a thread of the persister's own, so that a worker never waits for a disk.
//
// Which steps: the first step every local rank holds in each span of `every` steps (steps 0 to
// every-1, every to 2*every-1, ...): with a save every step and every = N, every Nth save, and
// the same steps on every node as long as each node's disk keeps up. When workers fail, the
// newest step every local rank holds, whatever its span. A copy is staged in memory first and
// checked against the slot's checksum and sequence (slot_copy.hpp): a slot reused meanwhile (the
// worker saved twice more) is dropped, never written torn. A torch.distributed.checkpoint save's
// coordinator slot also gives the folder its .metadata, so that DIR/step_<N> loads with torch's
// FileSystemReader. A full disk or a failing write is reported, never thrown.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "checkpoint/slot_copy.hpp"

namespace ddprun::agent {

// Which step to persist next from what each local rank holds (each rank's committed steps), after
// `last` (none: nothing persisted yet): the oldest step every rank holds whose span of `every`
// steps is later than `last`'s; nullopt: none yet.
std::optional<int64_t> step_to_persist(const std::vector<std::vector<int64_t>>& held,
                                       std::optional<int64_t> last, int64_t every);

class CheckpointPersister {
 public:
  // Reports come on `io`'s thread, never after the persister is gone.
  using Report = std::function<void(const PersistReport&)>;

  // Persists the regions in `regions_dir` into `dir` (made if missing) every `every` steps; with
  // the job's `token`, each file with its MAC, and only files with it are read back. A copy is
  // staged in memory where the node's checkpoint budget `limit` has room for it.
  CheckpointPersister(boost::asio::io_context& io, std::filesystem::path regions_dir,
                      std::filesystem::path dir, int64_t every, std::optional<store::Token> token,
                      std::optional<uint64_t> limit, Report report);
  // Ends the copy under way at its next chunk (its partial file removed); a write stuck in the
  // kernel is left to finish on its own.
  ~CheckpointPersister();
  CheckpointPersister(const CheckpointPersister&) = delete;
  CheckpointPersister& operator=(const CheckpointPersister&) = delete;

  // The round now running: the regions of these local ranks, as these global ranks. Starts polling.
  void watch(std::vector<std::pair<int, int>> local_and_global);
  // Workers failed: the newest step every local rank holds is persisted (if it is not yet).
  void persist_newest();
  // Waits (at most `limit`; a cancellation ends it) until every copy asked for so far has ended.
  boost::asio::awaitable<void> drain(std::chrono::milliseconds limit);
  // The steps whose file for global rank `rank` of a job of `world_size` ranks is complete.
  std::vector<int64_t> steps_on_disk(int rank, uint64_t world_size) const;
  // The round's nodes agreed to restore `step` at world size `world_size` (-1: nothing, at the
  // round's world size): the files of these global ranks for every later step saved at that world
  // size are of a timeline the job left, and
  // would be mixed with the new one's (a later save of the same step by only some ranks, then a
  // restore from disk): each is renamed .rank_<R>.ddpckpt.abandoned in its folder (kept, no longer
  // read), and one warning lists the steps. Copies of later steps still queued are not made; one
  // under way (of the last round's newest step, perhaps of a rank this node no longer has) ends
  // first, and its rank's later files are set aside too. Never waited for.
  void abandon_after(int64_t step, uint64_t world_size, const std::vector<int>& ranks);
  // Copies step `step`'s files back into the regions of `local_and_global` ranks, off the agent's
  // thread; false (and a kFailed report) if one could not be.
  boost::asio::awaitable<bool> restore(int64_t step,
                                       std::vector<std::pair<int, int>> local_and_global);

 private:
  struct Job {
    enum class Kind { kPersist, kRestore, kMarker, kAbandon };
    Kind kind = Kind::kPersist;
    int local_rank = 0;
    int rank = 0;
    int64_t step = 0;
    std::function<void(const PersistReport&)> done;  // after it, on the io thread; or empty
    uint64_t world_size = 0;                         // kAbandon's
  };
  struct Shared;
  void poll();
  std::vector<std::vector<int64_t>> held() const;
  void enqueue(int64_t step);
  // Queues `jobs` and waits until each has reported (at most `limit`); whether all did, restored.
  boost::asio::awaitable<bool> run_and_wait(std::vector<Job> jobs, std::chrono::milliseconds limit);

  boost::asio::io_context& io_;
  std::filesystem::path regions_;
  std::filesystem::path dir_;
  int64_t every_;
  boost::asio::steady_timer timer_;
  // False once this is destroyed: a poll whose timer had fired before the cancel still runs.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::vector<std::pair<int, int>> ranks_;
  std::optional<int64_t> last_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace ddprun::agent
