#pragma once
// What the replicator's tests share (checkpoint/replicator.hpp): nodes with real peer services on
// loopback, regions written as a worker writes them, the round's exchange of strides in one
// process, and waits bounded in time.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <catch2/catch.hpp>

#include "checkpoint/kept_steps.hpp"
#include "checkpoint/memory_use.hpp"
#include "checkpoint/peer_service.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/replicator.hpp"
#include "temp_folder.hpp"

namespace replicator_test {
using namespace ddprun::agent;
namespace fs = std::filesystem;
namespace asio = boost::asio;

struct Folder : ddprun::test::TempFolder {
  Folder() : TempFolder("ddprun-replicator-test") {}
};

// A rank's region as a worker saves into it: the two slots in turn, each commit one sequence
// number newer.
class Worker {
 public:
  // Slots of `slot` bytes.
  Worker(fs::path region, int rank, size_t slot = 64 << 10)
      : region_(std::move(region)), rank_(rank), slot_(slot) {}

  void save(int64_t step) {
    const int slot = static_cast<int>(sequence_ % 2);
    const std::string payload(slot_, static_cast<char>(step));
    SlotRecord& r = records_[slot];
    r.state = SlotRecord::kCommitted;
    r.step = step;
    r.size = payload.size();
    r.checksum = payload_crc(payload);
    r.sequence = ++sequence_;
    r.world_size = 2;
    r.rank = rank_;
    r.run_tag = run_tag_of("job");
    // Slot 0's record, rank and run tag where region_header_for puts them, slot 1's after them.
    std::string header = region_header_for(records_[0], slot_, 0);
    const std::string second = region_header_for(records_[1], slot_, 0);
    header.replace(128, 64, second, 64, 64);
    header.replace(200, 8, second, 192, 8);
    header.replace(216, 8, second, 208, 8);
    std::fstream f(region_, std::ios::in | std::ios::out | std::ios::binary);
    if (!f) f.open(region_, std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kRegionHeader + slot * slot_));
    f << payload;
    f.seekp(0);
    f << header;
  }

 private:
  fs::path region_;
  int rank_;
  size_t slot_;
  SlotRecord records_[2];
  uint64_t sequence_ = 0;
};

// The round's exchange, in one process: the widest of the nodes' strides and `floor`; the step the
// node that said last asks to keep (a board per node where that matters), and those of `asked`
// (other nodes').
class Board : public CopyBoard {
 public:
  explicit Board(int64_t floor) : floor(floor) {}
  asio::awaitable<bool> say(Said said) override {
    said_.push_back(said);
    co_return true;
  }
  asio::awaitable<Read> read() override {
    Read r;
    r.widest = floor;
    for (const Said& s : said_) r.widest = std::max(r.widest, s.stride);
    if (echo && !said_.empty() && said_.back().keep) r.keep.push_back(*said_.back().keep);
    r.keep.insert(r.keep.end(), asked.begin(), asked.end());
    std::sort(r.keep.begin(), r.keep.end());
    co_return r;
  }
  int64_t floor;
  bool echo = true;  // false: the node's own request is not read back (others' only)
  std::vector<int64_t> asked;
  std::vector<Said> said_;
};

inline std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// What the nodes of the job "job" prove to each other.
inline PeerAuth job_auth() {
  PeerAuth a;
  a.token = ddprun::store::Token("0123456789abcdef-job");
  a.scope = "checkpoints/job";
  return a;
}

struct Node {
  explicit Node(int rank, std::optional<uint64_t> limit = {})
      : service(job_auth(), "127.0.0.1", dir.path / "peers", limit, dir.path, run_tag_of("job")),
        worker(dir.path / "rank0", rank) {}
  Folder dir;
  PeerService service;
  Worker worker;
  std::vector<TransferReport> reports;
  std::vector<int64_t> kept() const { return sorted(kept_steps(dir.path / "kept", 0)); }
  std::vector<int64_t> held_of(const std::string& origin) const {
    const auto steps = service.copies().steps();
    const auto it = steps.find(origin);
    return it == steps.end() || it->second.empty() ? std::vector<int64_t>{}
                                                   : sorted(it->second.front());
  }
};

// `node`'s replicator, its reports kept in node.reports; a step that leaves its two newest waits
// `asked_within` for a request to keep it.
inline CheckpointReplicator replicator_of(
    asio::io_context& io, Node& node,
    std::chrono::milliseconds asked_within = CheckpointReplicator::kAskedWithin) {
  return CheckpointReplicator(
      io, node.service, node.dir.path,
      [&node](const TransferReport& r, const std::string&) { node.reports.push_back(r); },
      CheckpointReplicator::kGrantHeld, asked_within);
}

// Runs `io` until `done()` or 10 s passed; whether done.
template <typename Done>
inline bool settle_until(asio::io_context& io, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.run_for(std::chrono::milliseconds(5));
  }
  return done();
}

inline bool holds(const std::vector<int64_t>& steps, int64_t step) {
  return std::find(steps.begin(), steps.end(), step) != steps.end();
}

// Whether `node` has a report of step `step`'s copy (it got to the peer, or did not).
inline bool reported(const Node& node, int64_t step) {
  return std::any_of(node.reports.begin(), node.reports.end(),
                     [step](const TransferReport& r) { return r.step == step; });
}

// `from`'s step `step` of its one rank staged and put to `to`, as its replicator does.
inline TransferReport put_step(Node& from, const Node& to, int64_t step) {
  const auto run = [](auto awaitable) {  // (bounded by the service's own idle limits)
    asio::io_context io;
    auto done = asio::co_spawn(io, std::move(awaitable), asio::use_future);
    io.run();
    return done.get();
  };
  const TransferReport staged =
      run(from.service.stage(from.dir.path, {{0, 0}}, step, from.dir.path / "kept"));
  if (!staged.ok) return staged;
  return run(from.service.put(PeerAddress{"127.0.0.1", to.service.port()}, "a", {{0, 0}}, step,
                              from.dir.path / "kept", 0));
}

// What one copy of `a`'s slot takes of a peer's memory (its step 1, put to a node of its own).
inline uint64_t copy_size(Node& a) {
  Node probe(1);
  a.worker.save(1);
  REQUIRE(put_step(a, probe, 1).ok);
  const uint64_t copy = checkpoint_memory(probe.dir.path).peers;
  REQUIRE(copy > 0);
  return copy;
}

// `b` holds `a`'s steps 1 and 2.
inline void holds_two_copies(Node& a, const Node& b) {
  a.worker.save(2);
  REQUIRE(put_step(a, b, 1).ok);
  REQUIRE(put_step(a, b, 2).ok);
}

}  // namespace replicator_test
