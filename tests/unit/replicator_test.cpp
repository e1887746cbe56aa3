// The replicator (checkpoint/replicator.hpp) with real peer services on loopback and regions
// written as a worker writes them: two nodes copy the same steps, the first saved in each window
// of the job's stride, keep their two newest and any step another node asks them to keep, skip a
// window whose first save they missed, and copy the step the workers stopped at.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "replicator_nodes.hpp"

using namespace replicator_test;

TEST_CASE(
    "replicator: the room dropped for a worker's region is held for it, not taken back by a copy "
    "arriving before the worker measures, answered without waiting on a worker holding the "
    "budget's lock, on a node alone in its round too",
    "[replicator]") {
  Node a(0);
  const uint64_t copy = copy_size(a);
  Node b(1, 2 * copy + 4096);  // room for two copies, and nothing of its own yet
  holds_two_copies(a, b);
  asio::io_context io;
  CheckpointReplicator rb(io, b.service, b.dir.path,
                          [](const TransferReport&, const std::string&) {});
  std::vector<std::pair<uint64_t, uint64_t>> made;
  rb.on_room([&](uint64_t wanted, uint64_t freed) { made.emplace_back(wanted, freed); });
  // b is alone in its round (the job shrank to it): no peer, the copies it holds for a's earlier
  // rounds still there, and its worker's requests for room still answered.
  rb.watch(0, "b", {{0, 1}}, std::nullopt, std::make_shared<Board>(1));
  // b's worker asks for one copy's room, as ddprun.checkpoint does, while another worker holds
  // the budget's lock (making its region; or stopped for a stack dump): the agent does not wait
  // for it, and answers once it is free.
  {
    const BudgetLock other_worker(b.dir.path);
    std::ofstream(b.dir.path / ".room-0.tmp") << copy << "\n";
    fs::rename(b.dir.path / ".room-0.tmp", b.dir.path / ".room-0");
    const auto blocked = std::chrono::steady_clock::now();
    io.run_for(std::chrono::milliseconds(200));
    CHECK(std::chrono::steady_clock::now() - blocked < std::chrono::seconds(2));
    CHECK(fs::exists(b.dir.path / ".room-0"));
    CHECK(made.empty());
  }
  REQUIRE(settle_until(io, [&] { return !fs::exists(b.dir.path / ".room-0"); }));
  CHECK(made == std::vector<std::pair<uint64_t, uint64_t>>{{copy, copy}});
  CHECK(b.held_of("a") == std::vector<int64_t>{2});
  // Answered, the room is held: a's next copy, which would fit in the room freed, is refused
  // until the worker takes its room (removes the grant, making its region under the same lock).
  a.worker.save(3);
  const TransferReport early = put_step(a, b, 3);
  CHECK_FALSE(early.ok);
  CHECK_THAT(early.detail, Catch::Contains("its budget is"));
  REQUIRE(fs::exists(b.dir.path / ".room-0.granted"));
  CHECK(checkpoint_memory(b.dir.path).regions >= copy);
  // The round ends before the worker took it: the room held for it is released.
  rb.stop();
  CHECK_FALSE(fs::exists(b.dir.path / ".room-0.granted"));
  CHECK(put_step(a, b, 3).ok);
  CHECK(b.held_of("a") == std::vector<int64_t>{2, 3});
}

TEST_CASE(
    "replicator: two local ranks asking for room at once each get their own, held apart, and "
    "neither is given the other's",
    "[replicator]") {
  Node a(0);
  const uint64_t copy = copy_size(a);
  Node b(1, 2 * copy + 4096);  // room for two copies, and nothing of its own yet
  holds_two_copies(a, b);
  asio::io_context io;
  CheckpointReplicator rb(io, b.service, b.dir.path,
                          [](const TransferReport&, const std::string&) {});
  std::vector<std::pair<uint64_t, uint64_t>> made;
  rb.on_room([&](uint64_t wanted, uint64_t freed) { made.emplace_back(wanted, freed); });
  rb.watch(0, "b", {{0, 2}, {1, 3}}, std::nullopt, std::make_shared<Board>(1));
  // Both workers ask for one copy's room before the agent's next poll.
  for (int local_rank : {0, 1}) {
    const fs::path request = b.dir.path / (".room-" + std::to_string(local_rank));
    std::ofstream(request.string() + ".tmp") << copy << "\n";
    fs::rename(request.string() + ".tmp", request);
  }
  REQUIRE(settle_until(io, [&] {
    return !fs::exists(b.dir.path / ".room-0") && !fs::exists(b.dir.path / ".room-1");
  }));
  // Each dropped one copy and holds what it freed for its own worker.
  CHECK(made == std::vector<std::pair<uint64_t, uint64_t>>{{copy, copy}, {copy, copy}});
  CHECK(b.held_of("a").empty());
  for (int local_rank : {0, 1}) {
    INFO("local rank " << local_rank);
    const fs::path grant = b.dir.path / (".room-" + std::to_string(local_rank) + ".granted");
    REQUIRE(fs::exists(grant));
    CHECK(fs::file_size(grant) == copy);
  }
  CHECK(checkpoint_memory(b.dir.path).regions >= 2 * copy);
  rb.stop();
  CHECK_FALSE(fs::exists(b.dir.path / ".room-0.granted"));
  CHECK_FALSE(fs::exists(b.dir.path / ".room-1.granted"));
}

TEST_CASE("replicator: room held for a worker that never takes it is released after the hold",
          "[replicator]") {
  Node a(0);
  const uint64_t copy = copy_size(a);
  Node b(1, 2 * copy + 4096);  // room for two copies, and nothing of its own yet
  holds_two_copies(a, b);
  asio::io_context io;
  const auto hold = std::chrono::milliseconds(1000);  // (kGrantHeld in a job)
  CheckpointReplicator rb(
      io, b.service, b.dir.path, [](const TransferReport&, const std::string&) {}, hold);
  rb.watch(0, "b", {{0, 1}}, std::nullopt, std::make_shared<Board>(1));
  const auto asked = std::chrono::steady_clock::now();  // (the grant comes after)
  std::ofstream(b.dir.path / ".room-0.tmp") << copy << "\n";
  fs::rename(b.dir.path / ".room-0.tmp", b.dir.path / ".room-0");
  REQUIRE(settle_until(io, [&] { return !fs::exists(b.dir.path / ".room-0"); }));
  REQUIRE(fs::exists(b.dir.path / ".room-0.granted"));
  io.run_for(hold / 10);
  CHECK(fs::exists(b.dir.path / ".room-0.granted"));  // held while the worker may still come
  CHECK(settle_until(io, [&] { return !fs::exists(b.dir.path / ".room-0.granted"); }));
  CHECK(std::chrono::steady_clock::now() - asked >= hold);
  // The room is the copies' again.
  a.worker.save(3);
  CHECK(put_step(a, b, 3).ok);
  rb.stop();
}

TEST_CASE(
    "replicator: nodes copy the same steps, the first saved in each window of the stride, and "
    "the step the workers stopped at",
    "[replicator]") {
  asio::io_context io;
  Node a(0), b(1);
  auto board = std::make_shared<Board>(4);  // another node of the round wished a stride of 4
  CheckpointReplicator ra = replicator_of(io, a, std::chrono::milliseconds(0));
  CheckpointReplicator rb = replicator_of(io, b, std::chrono::milliseconds(0));
  ra.watch(0, "a", {{0, 0}}, PeerAddress{"127.0.0.1", b.service.port()}, board);
  rb.watch(0, "b", {{0, 1}}, PeerAddress{"127.0.0.1", a.service.port()}, board);
  REQUIRE(settle_until(io, [&] { return ra.stride() == 4 && rb.stride() == 4; }));
  // Both nodes' polls see each save before the next, and a window's first step is copied first.
  for (int64_t step = 1; step <= 10; ++step) {
    INFO("step " << step);
    a.worker.save(step);
    b.worker.save(step);
    const bool windows_first = step == 1 || step % 4 == 0;
    REQUIRE(settle_until(io, [&] {
      return ra.newest_local() == step && rb.newest_local() == step &&
             (!windows_first || (reported(a, step) && reported(b, step)));
    }));
  }
  // Windows [0, 4), [4, 8), [8, 12): steps 1, 4 and 8 staged on both, the newest two kept and
  // held by the peer.
  CHECK(a.kept() == std::vector<int64_t>{4, 8});
  CHECK(b.kept() == std::vector<int64_t>{4, 8});
  CHECK(b.held_of("a") == std::vector<int64_t>{4, 8});
  CHECK(a.held_of("b") == std::vector<int64_t>{4, 8});
  CHECK(ra.safe_step() == 8);
  CHECK(rb.safe_step() == 8);

  // Node b misses saves 11 and 12 (they come between two of its polls): it cannot tell which
  // step was the first of window [12, 16), and skips it rather than stage 13.
  a.worker.save(11);
  REQUIRE(settle_until(io, [&] { return ra.newest_local() == 11; }));
  a.worker.save(12);
  // (Staged; its copy waits at b for b's own step 12 until b's saves pass it.)
  REQUIRE(settle_until(io, [&] { return holds(a.kept(), 12); }));
  b.worker.save(11);
  b.worker.save(12);
  b.worker.save(13);
  a.worker.save(13);
  REQUIRE(settle_until(io, [&] { return ra.newest_local() == 13 && rb.newest_local() == 13; }));
  CHECK(a.kept() == std::vector<int64_t>{8, 12});
  CHECK(b.kept() == std::vector<int64_t>{4, 8});

  // The workers stop at step 13: after 2 s without a save both nodes copy it.
  CHECK(settle_until(io, [&] {
    return a.held_of("b") == std::vector<int64_t>{8, 13} &&
           b.held_of("a") == std::vector<int64_t>{12, 13} && ra.safe_step() == 13 &&
           rb.safe_step() == 13;
  }));
  CHECK(a.held_of("b") == std::vector<int64_t>{8, 13});
  CHECK(b.held_of("a") == std::vector<int64_t>{12, 13});
  // Each keeps its two newest windows' steps beside it.
  CHECK(a.kept() == std::vector<int64_t>{8, 12, 13});
  CHECK(b.kept() == std::vector<int64_t>{4, 8, 13});
  for (const auto& r : a.reports) CHECK(r.ok);
  for (const auto& r : b.reports) CHECK(r.ok);

  // The next round restores step 12 (as where a rank failed before step 13 was everywhere): every
  // step after it is dropped on both nodes, and a's safe step 13 no longer counts. a's step 13 of
  // the new timeline goes to b again, though b is the same peer.
  ra.stop();
  rb.stop();
  a.service.sources().drop_after(12, 1);
  b.service.sources().drop_after(12, 1);
  ra.restored(12);
  rb.restored(12);
  CHECK_FALSE(ra.safe_step());
  CHECK(b.held_of("a") == std::vector<int64_t>{12});
  ra.watch(1, "a", {{0, 0}}, PeerAddress{"127.0.0.1", b.service.port()}, board);
  rb.watch(1, "b", {{0, 1}}, PeerAddress{"127.0.0.1", a.service.port()}, board);
  a.worker.save(13);
  b.worker.save(13);
  // (a's safe step needs b's copy at a too, which may come after a's at b.)
  CHECK(settle_until(io, [&] {
    return b.held_of("a") == std::vector<int64_t>{12, 13} && ra.safe_step() == 13;
  }));
  CHECK(b.held_of("a") == std::vector<int64_t>{12, 13});
  CHECK(ra.safe_step() == 13);
}

TEST_CASE(
    "replicator: copies that cannot reach the peer say so once, after four windows of steps, and "
    "once more when the safe step moves again",
    "[replicator]") {
  asio::io_context io;
  Node a(0), b(1);
  auto board = std::make_shared<Board>(1);
  std::vector<std::pair<bool, int64_t>> said;
  CheckpointReplicator ra(
      io, a.service, a.dir.path,
      [&](const TransferReport& r, const std::string&) { a.reports.push_back(r); });
  ra.on_behind([&](bool behind, int64_t steps) { said.emplace_back(behind, steps); });
  int unreachable = 0;  // a port nothing listens on any more
  {
    asio::ip::tcp::acceptor gone(io, {asio::ip::make_address("127.0.0.1"), 0});
    unreachable = gone.local_endpoint().port();
  }
  ra.watch(0, "a", {{0, 0}}, PeerAddress{"127.0.0.1", unreachable}, board);
  // Each save's copy tried before the next.
  const auto save = [&](int64_t step) {
    a.worker.save(step);
    return settle_until(io, [&] { return reported(a, step); });
  };
  for (int64_t step = 1; step <= 4; ++step) REQUIRE(save(step));
  CHECK(said.empty());  // three steps since the first: not yet four windows of the stride (1)
  CHECK_FALSE(ra.behind());
  for (int64_t step = 5; step <= 8; ++step) REQUIRE(save(step));
  CHECK(said == std::vector<std::pair<bool, int64_t>>{{true, 4}});  // once, at step 5
  CHECK(ra.behind());
  CHECK_FALSE(ra.safe_step());
  CHECK_FALSE(a.reports.empty());
  // The next round's peer answers: once a copy is there, the copies have caught up.
  ra.watch(0, "a", {{0, 0}}, PeerAddress{"127.0.0.1", b.service.port()}, board);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int64_t step = 9; !ra.safe_step() && std::chrono::steady_clock::now() < deadline; ++step) {
    save(step);
  }
  REQUIRE(ra.safe_step());
  CHECK(said.size() == 2);
  CHECK(said.back() == std::pair<bool, int64_t>{false, 0});
  CHECK_FALSE(ra.behind());
}

TEST_CASE(
    "replicator: the steps a node keeps turn over in the same memory pages, bounded, and room "
    "for a worker's region takes those pages first",
    "[replicator]") {
  asio::io_context io;
  Node a(0), b(1);
  auto board = std::make_shared<Board>(1);
  // (No step waits for a request to keep it: nobody asks here.)
  CheckpointReplicator ra = replicator_of(io, a, std::chrono::milliseconds(0));
  CheckpointReplicator rb = replicator_of(io, b, std::chrono::milliseconds(0));
  ra.watch(0, "a", {{0, 0}}, PeerAddress{"127.0.0.1", b.service.port()}, board);
  rb.watch(0, "b", {{0, 1}}, PeerAddress{"127.0.0.1", a.service.port()}, board);
  const fs::path kept = a.dir.path / "kept";
  const auto inode = [](const fs::path& file) {
    struct stat st {};
    return ::stat(file.c_str(), &st) == 0 ? st.st_ino : ino_t{0};
  };
  // Each stage of a's, from step 3 on, writes over a file held in kept/.spare before it: one
  // alive there when the stage began (so no new file can have its inode number). Both nodes save
  // the same bytes (DDP's state): each holds the other's copy as a link to its own kept step,
  // which is what holds its pages until the peer's copy goes too.
  const auto spares_now = [&] {
    std::set<ino_t> out;
    std::error_code none;  // (no folder before the first drop)
    for (fs::directory_iterator it(kept / ".spare", none), end; it != end; ++it) {
      out.insert(inode(it->path()));
    }
    return out;
  };
  size_t reused = 0;
  for (int64_t step = 1; step <= 8; ++step) {
    const std::set<ino_t> spares = spares_now();
    CHECK(spares.size() <= 1);  // at most what one stage writes: one rank's copy
    a.worker.save(step);
    b.worker.save(step);
    const auto newest = [step](const std::vector<int64_t>& steps) {
      return !steps.empty() && steps.back() == step;
    };
    REQUIRE(settle_until(io, [&] {
      return newest(a.kept()) && newest(b.kept()) && newest(b.held_of("a")) &&
             newest(a.held_of("b"));
    }));
    const fs::path file = kept / fmt::format("step_{}", step) / "rank_0.ddpckpt";
    if (spares.contains(inode(file))) ++reused;
    // Each kept step holds the step's bytes, whatever pages it was written over.
    std::ifstream in(file, std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    REQUIRE(bytes.size() == kRegionHeader + (64 << 10));
    CHECK(bytes.substr(kRegionHeader) == std::string(64 << 10, static_cast<char>(step)));
    // Kept: the two newest steps, and the spare.
    CHECK(checkpoint_memory(a.dir.path).kept <= 3 * allocated_for(kRegionHeader + (64 << 10)));
  }
  CHECK(reused >= 5);
  for (const auto& r : a.reports) CHECK(r.ok);

  // a's worker asks for room: the spare pages go first, before any copy held for the peer.
  REQUIRE(spares_now().size() == 1);
  const std::vector<int64_t> held_before = a.held_of("b");
  const uint64_t spare = allocated_for(kRegionHeader + (64 << 10));
  std::ofstream(a.dir.path / ".room-0.tmp") << spare << "\n";
  fs::rename(a.dir.path / ".room-0.tmp", a.dir.path / ".room-0");
  REQUIRE(settle_until(io, [&] { return !fs::exists(a.dir.path / ".room-0"); }));
  CHECK(spares_now().empty());
  CHECK(a.held_of("b") == held_before);
  ra.stop();
  rb.stop();
}

TEST_CASE(
    "replicator: a step another node asks to keep outlives the two newest windows, and goes once "
    "no node asks for it",
    "[replicator]") {
  asio::io_context io;
  Node a(0), b(1);
  // A board each (a node's own request is its own); another node, whose copies fell behind, asks
  // both to keep step 2: its peer holds its step 2 only.
  auto board_a = std::make_shared<Board>(1), board_b = std::make_shared<Board>(1);
  board_a->asked = board_b->asked = {2};
  CheckpointReplicator ra = replicator_of(io, a, std::chrono::milliseconds(0));
  CheckpointReplicator rb = replicator_of(io, b, std::chrono::milliseconds(0));
  ra.watch(0, "a", {{0, 0}}, PeerAddress{"127.0.0.1", b.service.port()}, board_a);
  rb.watch(0, "b", {{0, 1}}, PeerAddress{"127.0.0.1", a.service.port()}, board_b);
  for (int64_t step = 1; step <= 6; ++step) {
    a.worker.save(step);
    b.worker.save(step);
    REQUIRE(settle_until(io, [&] { return holds(a.kept(), step) && holds(b.kept(), step); }));
  }
  // The two newest and the step asked for; steps 1 and 3 gone (asked for by nobody).
  for (const Node* n : {&a, &b}) {
    const std::vector<int64_t> kept = n->kept();
    CHECK((holds(kept, 2) && holds(kept, 5) && holds(kept, 6)));
    CHECK_FALSE(holds(kept, 1));
    CHECK_FALSE(holds(kept, 3));
  }
  CHECK(holds(ra.asked(), 2));
  // Nobody asks any more (the node caught up): the step goes at the next read.
  board_a->asked.clear();
  board_b->asked.clear();
  CHECK(settle_until(io, [&] { return !holds(a.kept(), 2) && !holds(b.kept(), 2); }));
  ra.stop();
  rb.stop();
}

TEST_CASE(
    "replicator: a step that leaves the two newest waits for a request to keep it, and goes "
    "where none comes in time",
    "[replicator]") {
  asio::io_context io;
  Node a(0), b(1);
  auto board = std::make_shared<Board>(1);
  board->echo = false;  // (a copy slow on a loaded machine makes this node ask for a step too)
  const auto wait = std::chrono::milliseconds(1000);  // (kAskedWithin in a job)
  CheckpointReplicator ra = replicator_of(io, a, wait);
  ra.watch(0, "a", {{0, 0}}, PeerAddress{"127.0.0.1", b.service.port()}, board);
  for (int64_t step = 1; step <= 2; ++step) {
    a.worker.save(step);
    REQUIRE(settle_until(io, [&] { return holds(a.kept(), step); }));
  }
  // Step 3's stage makes step 1 leave the newest two; a request for it comes at once.
  a.worker.save(3);
  REQUIRE(settle_until(io, [&] { return holds(a.kept(), 3); }));
  CHECK(holds(a.kept(), 1));  // waiting
  board->asked = {1};
  // Steps 4 and 5 make step 2 leave (step 3 may have been kept as the step the workers stopped
  // at, on a slow machine, and not count among the windows); no request comes: gone once the wait
  // passed.
  for (int64_t step = 4; step <= 5; ++step) {
    a.worker.save(step);
    REQUIRE(settle_until(io, [&] { return holds(a.kept(), step); }));
  }
  CHECK(settle_until(io, [&] { return !holds(a.kept(), 2); }));
  CHECK(holds(a.kept(), 1));  // asked for
  CHECK((holds(a.kept(), 4) && holds(a.kept(), 5)));
  ra.stop();
}

TEST_CASE(
    "replicator: a node whose copies its peer refuses asks every node to keep its safe step, "
    "and stops asking once a copy gets through",
    "[replicator]") {
  Node a(0);
  const uint64_t copy = copy_size(a);
  Node b(1, copy + 4096);  // room for one copy of a's: the next is refused until it goes
  asio::io_context io;
  auto board = std::make_shared<Board>(1);
  CheckpointReplicator ra = replicator_of(io, a);
  ra.watch(0, "a", {{0, 0}}, PeerAddress{"127.0.0.1", b.service.port()}, board);
  a.worker.save(1);
  REQUIRE(settle_until(io, [&] { return ra.safe_step() == 1; }));
  CHECK_FALSE(ra.asks());  // caught up: nothing to ask
  // Each save's copy tried (and refused) before the next.
  for (int64_t step = 2; step <= 5; ++step) {
    a.worker.save(step);
    REQUIRE(settle_until(io, [&] { return reported(a, step); }));
  }
  // (The newest step's copy refused too: none is on its way when the peer makes room below.)
  REQUIRE(settle_until(io, [&] {
    return std::any_of(a.reports.begin(), a.reports.end(),
                       [](const TransferReport& r) { return r.step == 5 && !r.ok; });
  }));
  CHECK(ra.safe_step() == 1);
  CHECK(ra.asks() == 1);
  REQUIRE_FALSE(board->said_.empty());
  CHECK(board->said_.back().keep == 1);
  CHECK(ra.asked() == std::vector<int64_t>{1});
  // Its own step 1 is kept too (a node lost elsewhere restores it everywhere).
  CHECK(holds(a.kept(), 1));
  // The job's stride widens (another node's copies are slow): step 1 is still what the peer
  // holds of this node, and still asked for.
  board->floor = 8;
  CHECK(settle_until(io, [&] { return ra.stride() == 8; }));
  CHECK(ra.asks() == 1);
  board->floor = 1;
  // The peer makes room (its copy of step 1 dropped for a worker there) for one copy: the next
  // save's gets through (as the window's step, or as the step the workers stopped at). One save
  // only: the peer has no room for a second copy while it holds this one.
  b.service.drop_oldest_copies(copy);
  a.worker.save(6);
  REQUIRE(settle_until(io, [&] { return ra.safe_step() > 1; }));
  CHECK(ra.safe_step() == 6);
  // Step 1 is asked for no more; the copies have caught up (the workers stopped saving): nothing
  // is.
  CHECK(settle_until(io, [&] { return ra.asks() != 1; }));
  CHECK(settle_until(io, [&] { return !ra.asks() && !board->said_.back().keep; }));
  ra.stop();
}

TEST_CASE(
    "replicator: a step kept already (the one a round restored) goes to the new peer as it is, "
    "not copied again",
    "[replicator]") {
  asio::io_context io;
  Node a(0), b(1);
  a.worker.save(1);
  {  // the round before staged it
    asio::io_context once;
    auto done = asio::co_spawn(once, a.service.stage(a.dir.path, {{0, 0}}, 1, a.dir.path / "kept"),
                               asio::use_future);
    once.run();
    REQUIRE(done.get().ok);
  }
  const fs::path file = a.dir.path / "kept" / "step_1" / "rank_0.ddpckpt";
  struct stat before {};
  REQUIRE(::stat(file.c_str(), &before) == 0);
  CheckpointReplicator ra = replicator_of(io, a);
  ra.watch(1, "a", {{0, 0}}, PeerAddress{"127.0.0.1", b.service.port()},
           std::make_shared<Board>(1));
  REQUIRE(settle_until(io, [&] { return reported(a, 1); }));
  CHECK(a.reports.back().ok);
  CHECK(b.held_of("a") == std::vector<int64_t>{1});
  struct stat after {};
  REQUIRE(::stat(file.c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);  // a stage writes a file of its own and renames it
  CHECK(after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
  ra.stop();
}
