// How the replicator's copies stop (checkpoint/replicator.hpp, PeerService::abandon_stages, the
// StageEpochs under them): a stage of a round whose workers are interrupted keeps nothing, and the
// workers' requests for room are answered until they ended.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "checkpoint/spare_pages.hpp"
#include "replicator_nodes.hpp"

using namespace replicator_test;

TEST_CASE(
    "replicator: a stage asked for before its round was interrupted keeps nothing, even where it "
    "begins after, and is no sign of a narrow stride; one asked for after keeps its step",
    "[replicator]") {
  Node a(0);
  a.worker.save(1);
  const fs::path kept = a.dir.path / "kept";
  const auto run = [](auto awaitable) {
    asio::io_context io;
    auto done = asio::co_spawn(io, std::move(awaitable), asio::use_future);
    io.run();
    return done.get();
  };
  auto asked = a.service.stage(a.dir.path, {{0, 0}}, 1, kept);  // (begins once awaited)
  a.service.abandon_stages();
  const TransferReport abandoned = run(std::move(asked));
  CHECK_FALSE(abandoned.ok);
  CHECK_FALSE(abandoned.overtaken);
  CHECK_THAT(abandoned.detail, Catch::Contains("abandoned"));
  CHECK(a.kept().empty());
  CHECK_FALSE(fs::exists(kept / "step_1"));
  const TransferReport after = run(a.service.stage(a.dir.path, {{0, 0}}, 1, kept));
  CHECK(after.ok);
  CHECK(a.kept() == std::vector<int64_t>{1});
}

TEST_CASE(
    "replicator: a stage's copy is never committed once abandon() returned, and abandon() waits "
    "for a commit under way",
    "[replicator]") {
  StageEpochs epochs;
  const uint64_t began = epochs.current();
  std::promise<void> entered, release;
  std::future<bool> committing = std::async(std::launch::async, [&] {
    return epochs.commit_unless_abandoned(began, [&] {
      entered.set_value();
      release.get_future().wait();
    });
  });
  entered.get_future().wait();
  std::future<void> abandoning = std::async(std::launch::async, [&] { epochs.abandon(); });
  // (Bounded: the commit holds the lock until released.)
  CHECK(abandoning.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  release.set_value();
  CHECK(committing.get());  // begun before the abandon: it completes
  abandoning.get();
  CHECK(epochs.abandoned(began));
  bool ran = false;
  CHECK_FALSE(epochs.commit_unless_abandoned(began, [&] { ran = true; }));
  CHECK_FALSE(ran);
  CHECK(epochs.commit_unless_abandoned(epochs.current(), [&] { ran = true; }));
  CHECK(ran);
}

TEST_CASE(
    "replicator: once its round's workers are interrupted nothing more is copied, a worker saving "
    "while it is stopped still gets its room, and the round's end releases it",
    "[replicator]") {
  Node a(0);
  const uint64_t copy = copy_size(a);
  Node b(1, 4 * copy);
  holds_two_copies(a, b);
  asio::io_context io;
  CheckpointReplicator rb = replicator_of(io, b);
  rb.watch(0, "b", {{0, 1}}, PeerAddress{"127.0.0.1", a.service.port()},
           std::make_shared<Board>(1));
  rb.interrupt();
  // b's worker saves in its SIGTERM handler: a step, then a request for a copy's room.
  b.worker.save(1);
  std::ofstream(b.dir.path / ".room-0.tmp") << copy << "\n";
  fs::rename(b.dir.path / ".room-0.tmp", b.dir.path / ".room-0");
  REQUIRE(settle_until(io, [&] { return !fs::exists(b.dir.path / ".room-0"); }));
  CHECK(fs::exists(b.dir.path / ".room-0.granted"));
  io.run_for(std::chrono::milliseconds(300));  // (polls every few ms: time to copy, were it on)
  CHECK(b.kept().empty());
  CHECK(a.held_of("b").empty());
  CHECK(b.reports.empty());
  // The workers ended: their room is released.
  rb.stop();
  CHECK_FALSE(fs::exists(b.dir.path / ".room-0.granted"));
}

TEST_CASE(
    "replicator: a stage abandoned while it writes over a spare's pages gives them back to the "
    "spares",
    "[replicator]") {
  // A slot of 32 MiB, long enough to copy that the abandonment lands while its bytes go over the
  // spare's pages (once the spare is taken); where the stage was quicker, it is tried again.
  constexpr size_t kBig = 32 << 20;
  Folder dir;
  Worker worker(dir.path / "rank0", 0, kBig);
  worker.save(1);
  const fs::path keep = dir.path / "kept";
  const fs::path spares = spares_of(keep);
  const fs::path kept_step = keep / "step_1";
  const fs::path tmp = kept_step / ".rank_0.tmp";
  const std::atomic<bool> never{false};
  StageEpochs epochs;
  int abandoned_over_spare = 0;
  for (int attempt = 0; attempt < 20 && abandoned_over_spare == 0; ++attempt) {
    fs::remove_all(keep);
    REQUIRE(make_spare(spares, dir.path / "spare.tmp", kBig + (1 << 20), never));
    const uint64_t held = spare_memory(spares);
    fs::create_directories(kept_step);
    const uint64_t began = epochs.current();
    std::future<RankStage> stage = std::async(std::launch::async, [&] {
      return stage_rank(dir.path, RankSlot{0, 0}, 1, kept_step, std::nullopt, epochs, began,
                        2 * held);
    });
    // The spare taken (renamed to the stage's file): abandoned now, before the copy is done.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!fs::exists(tmp) &&
           stage.wait_for(std::chrono::seconds(0)) != std::future_status::ready &&
           std::chrono::steady_clock::now() < deadline) {
    }
    epochs.abandon();
    const RankStage r = stage.get();
    if (r.error.empty()) continue;  // copied before the abandonment: again
    CHECK_THAT(r.error, Catch::Contains("abandoned"));
    CHECK_FALSE(fs::exists(kept_step / "rank_0.ddpckpt"));
    CHECK_FALSE(fs::exists(tmp));
    // The pages the stage wrote over (a spare larger than a copy gives the rest back) are spare
    // again.
    CHECK(spare_memory(spares) >= kRegionHeader + kBig);
    ++abandoned_over_spare;
  }
  CHECK(abandoned_over_spare == 1);
}
