#pragma once
// Checkpoints copied between agents: each agent serves a port of its own (an OS-chosen port on
// the address it announces to its peers) where the job's other agents put copies of their ranks'
// committed slots (held in PeerCopies) and get any slot this node holds (SlotSources: its regions,
// its kept copies, the copies it holds) by whose state it is; and it puts and gets the same on
// other agents' ports. Everything runs on threads of the service's own, so that moving a gigabyte
// never delays the agent's loop: the network's on one, the staging (which must beat the worker's
// next save but one) on another; what a caller awaits completes on the caller's executor.
//
// One request per connection (peer_link.hpp greets it first), numbers as 8-byte little-endian
// words: op (1 put, 2 get), the origin's local rank, the global rank, the step, for a put the
// bytes that follow (a file of the persisted layout, header and payload) and for a get the world
// size, for a put the round whose agents sent it (a get's 0; a put of a round before the last
// restore here is refused), the origin id's length, then the id (a get's is unused). The answer: a
// status word (0 ok), a message's length and the message; a get's answer then carries the file's
// length and the file. Where the job has a token, a file's payload is preceded by the nonce of its
// MAC and followed by the MAC, and a put's header by its own MAC (its nonce, then the MAC); each
// (copy_mac.hpp: under the token) covers the connection's session (PeerLink::session), the
// request, the header and, for a payload's, the payload as sent: a copy altered on its way, filed
// under another origin, rank or round than its sender's, or replayed from another connection (a
// get's answer from an abandoned timeline) is refused, as is a put whose slot names another
// global rank, or another run.
//
// A put whose header carries its payload's digest (payload_digest.hpp: a kept copy's) may be
// answered "held" (status 2) instead: this node keeps a copy of its own of the same step whose
// payload is the same (size, CRC and digest; DDP's state is byte for byte the same on every node),
// and holds the peer's copy as a link to it (PeerCopies::linked), so that no payload crosses. It
// waits a moment (kSameWait) for its own copy of the step where it has none yet but its workers
// saved that step, or have not saved it yet.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "checkpoint/copy_mac.hpp"
#include "checkpoint/kept_steps.hpp"
#include "checkpoint/payload_digest.hpp"
#include "checkpoint/peer_copies.hpp"
#include "checkpoint/peer_link.hpp"
#include "checkpoint/slot_sources.hpp"

namespace ddprun::agent {

struct PeerAddress {
  std::string host;
  int port = 0;
};

// How a put or a get of one step ended.
struct TransferReport {
  bool ok = false;
  int64_t step = 0;
  uint64_t bytes = 0;  // payload bytes moved
  // A put's payload bytes the peer held already (the same bytes of its own, PeerCopies::linked):
  // not sent.
  uint64_t held = 0;
  std::chrono::duration<double> took{0};
  std::string detail;  // why not, when not ok
  // A get the peer answered with a refusal (it holds no such slot, or sent another), or whose
  // copy fails its checksum (its MAC, where the job has a token, held: the copy itself is not
  // sound): asking it again gives the same answer. Not ok without it: the connection failed (the
  // peer unreachable, at its cap of connections, gone mid-transfer) or the bytes were altered on
  // their way (the MAC).
  bool refused = false;
  // A get's: how many of the ranks wanted, in their order, arrived; where not ok, the one after
  // them is the one that failed (and `refused` is of it), and those after it were not asked.
  size_t arrived = 0;
  // A stage: the worker's saves reused a slot before its copy was complete (the copies need a
  // wider stride).
  bool overtaken = false;
  // A get's: the payload bytes written over pages the node held beforehand (spare_pages.hpp: a
  // spare's restore room, a dropped copy's), not into pages allocated as they came.
  uint64_t over_held_pages = 0;
};

class PeerService {
 public:
  // Serves on `bind_host` (an IP address; an OS-chosen port), holding copies in `copies_dir`,
  // and giving the slots of the regions in `regions` (the node's checkpoint folder; their kept
  // copies in `regions`/kept) of the run whose tag is `run_tag`; the copies held and kept are
  // bounded by `limit`, the node's checkpoint budget, with everything else in `regions`
  // (memory_use.hpp). Throws boost::system::system_error when it cannot listen.
  PeerService(PeerAuth auth, const std::string& bind_host, std::filesystem::path copies_dir,
              std::optional<uint64_t> limit, std::filesystem::path regions, uint64_t run_tag);
  // Stops the thread; a transfer under way is abandoned (a copy half received is removed).
  ~PeerService();
  PeerService(const PeerService&) = delete;
  PeerService& operator=(const PeerService&) = delete;

  int port() const { return port_; }
  // Proves `secret` (the job's secret, where the job has no token: Rendezvous::job_secret) from
  // now on, both ways; until a PeerAuth has a token every connection is refused and none is made.
  // In force when it returns.
  void use_secret(store::Token secret);
  const PeerCopies& copies() const { return *copies_; }
  // Every slot this node can give.
  const SlotSources& sources() const { return *sources_; }
  // PeerCopies::keep_only.
  void keep_only(const std::vector<std::string>& origins) { copies_->keep_only(origins); }
  // What the last stage wrote of memory: the spare pages held for the next (spare_pages.hpp).
  uint64_t spare_room() const { return copies_->spare_room(); }
  // PeerCopies::drop_oldest.
  uint64_t drop_oldest_copies(uint64_t bytes) { return copies_->drop_oldest(bytes); }

  // Copies step `step` of each of `ranks` (their slots in the regions of `regions`) at memory
  // speed into `keep`/step_<S>/rank_<L>.ddpckpt (the persisted layout), checked against its
  // checksum and its slot's sequence: the worker's next save but one reuses the slot, and a
  // network is slower than that. A slot the worker reused meanwhile fails it, as does
  // abandon_stages() called after this, and a step that fails leaves nothing in `keep`. `bytes`:
  // the payload copied.
  boost::asio::awaitable<TransferReport> stage(std::filesystem::path regions,
                                               std::vector<RankSlot> ranks, int64_t step,
                                               std::filesystem::path keep);
  // Puts the copies of step `step` kept in `keep` (stage()) for each of `ranks` to `to`, as node
  // `origin`'s copies sent in round `round` (the peer keeps none once a restore of a later round
  // began there: PeerCopies::current). ok once the peer holds every rank's.
  boost::asio::awaitable<TransferReport> put(PeerAddress to, std::string origin,
                                             std::vector<RankSlot> ranks, int64_t step,
                                             std::filesystem::path keep, int round);
  // The puts under way send no further rank (the round ended: what they carry may be of a
  // timeline the next round abandons); a rank's transfer already begun ends, and the peer keeps
  // it only where no restore of a later round came there (PeerCopies::current). Any thread.
  void abandon_puts() { ++puts_epoch_; }
  // The puts whose coroutines run now (an abandoned one's too, until it ends). Any thread.
  int puts_under_way() const { return puts_under_way_; }
  // The stages under way keep nothing (the round ended: they copy a step of a timeline the next
  // round may leave, and the machine's cores and memory are the restore's now); once it returns,
  // none of them commits a copy. Any thread.
  void abandon_stages() { stage_epochs_.abandon(); }
  // Whether a stage() is copying into a keep folder now (an abandoned round's too). Any thread.
  bool staging() const { return staging_ != kNotStaging; }
  // Gets step `step` of each (global rank, world size) of `wanted` from `from`, whichever of its
  // sources holds it, into `folder`/step_<step>/rank_<rank>.ddpckpt (the persisted layout; a DCP
  // coordinator's slot also gives the folder its .metadata), checked against its checksum; over
  // the node's spare pages where it holds some (`folder` on the regions' file system).
  boost::asio::awaitable<TransferReport> get(PeerAddress from,
                                             std::vector<std::pair<int, int>> wanted, int64_t step,
                                             std::filesystem::path folder);

 private:
  // stage() and put() begun in the epoch of abandon_stages() and abandon_puts() they were asked
  // in.
  boost::asio::awaitable<TransferReport> stage_from(std::filesystem::path regions,
                                                    std::vector<RankSlot> ranks, int64_t step,
                                                    std::filesystem::path keep, uint64_t began);
  boost::asio::awaitable<TransferReport> put_from(PeerAddress to, std::string origin,
                                                  std::vector<RankSlot> ranks, int64_t step,
                                                  std::filesystem::path keep, int round,
                                                  uint64_t epoch);
  boost::asio::awaitable<void> serve();
  // Whether `origin`'s local rank `local_rank`'s slot `rec`, with `digest`, is now held as a link
  // to a kept copy of this node's own with the same payload (waiting up to kSameWait for this
  // node's own copies of the step, where it has none yet or is staging them; once for a step of
  // an origin, not again for its other ranks), unless copies sent in round `round` are no longer
  // current (PeerCopies::current).
  boost::asio::awaitable<bool> hold_same(const std::string& origin, int local_rank,
                                         const SlotRecord& rec, const PayloadDigest& digest,
                                         int round);
  boost::asio::awaitable<void> answer(boost::asio::ip::tcp::socket socket);
  // The MAC of a copy crossing between this job's agents, not begun yet, where the job has a token
  // (on io_); none without one.
  std::optional<CopyMac> copy_mac() const;

  PeerAuth auth_;
  uint64_t run_tag_;
  std::optional<uint64_t> limit_;  // the node's checkpoint budget
  // Before io_: a connection's coroutine, destroyed with io_, may still refer to them.
  std::unique_ptr<PeerCopies> copies_;
  std::unique_ptr<SlotSources> sources_;
  std::filesystem::path regions_;  // this node's workers' regions
  std::filesystem::path kept_;     // this node's copies of its own steps (stage()'s `keep`)
  static constexpr int64_t kNotStaging = std::numeric_limits<int64_t>::min();
  std::atomic<int64_t> staging_{kNotStaging};  // the step stage() is copying
  std::atomic<uint64_t> puts_epoch_{0};        // abandon_puts()
  StageEpochs stage_epochs_;                   // abandon_stages()
  std::atomic<int> puts_under_way_{0};
  // The origin and step whose wait for this node's own copy last came to nothing (on io_).
  std::optional<std::pair<std::string, int64_t>> waited_in_vain_;
  boost::asio::io_context io_;  // the network's, on thread_
  // stage()'s copies at memory speed, on stage_thread_: never queued behind a transfer.
  boost::asio::io_context stage_io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> stage_work_{
      stage_io_.get_executor()};
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::thread thread_, stage_thread_;
};

}  // namespace ddprun::agent
