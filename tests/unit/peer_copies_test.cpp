// Checkpoints copied between agents (checkpoint/peer_service.hpp): real services on loopback, each
// with its thread, real region files; what a peer keeps, what it gives back, and what a broken
// copy, a transfer cut short and the memory limit leave behind. (Who may connect, and what a copy
// must prove: peer_copies_trust_test.cpp.)

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

#include <catch2/catch.hpp>

#include "checkpoint/copy_mac.hpp"
#include "checkpoint/memory_use.hpp"
#include "checkpoint/peer_service.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/spare_pages.hpp"
#include "peer_service_fixture.hpp"
#include "stat_of.hpp"
#include "temp_folder.hpp"

using namespace ddprun::test::peer;
using ddprun::test::stat_of;

TEST_CASE(
    "peer copies: a put copies each rank's slot to the peer, and a get restores it bit for bit",
    "[peer_copies]") {
  Folder a, b, c;
  auto holder_ = service(auth_with("0123456789abcdef-job"), b.path);
  auto sender_ = service(auth_with("0123456789abcdef-job"), a.path);
  PeerService &holder = *holder_, &sender = *sender_;
  const std::string p0 = make_region(a.path, 0, 4, 7, 3 << 20, 1);
  const std::string p1 = make_region(a.path, 1, 5, 7, 1 << 20, 2);
  const PeerAddress to{"127.0.0.1", holder.port()};
  TransferReport sent = put(sender, to, "node-a", a.path, {{0, 4}, {1, 5}}, 7);
  INFO(sent.detail);
  REQUIRE(sent.ok);
  CHECK(sent.bytes == (3u << 20) + (1u << 20));
  CHECK(holder.copies().steps() == Steps{{"node-a", {{7}, {7}}}});
  // Once the peer has it, the sender keeps its own copy of the step too.
  CHECK(kept_steps(a.path / "kept", 0) == std::vector<int64_t>{7});
  CHECK(kept_steps(a.path / "kept", 1) == std::vector<int64_t>{7});
  // A node taking node-a's place gets global ranks 4 and 5 by whose state they are.
  auto newcomer_ = service(auth_with("0123456789abcdef-job"), c.path);
  PeerService& newcomer = *newcomer_;
  TransferReport got = wait(newcomer.get(to, {{4, 4}, {5, 4}}, 7, c.path / "restore"));
  INFO(got.detail);
  REQUIRE(got.ok);
  CHECK(payload_of_file(fetched(c.path / "restore", 4, 7)) == p0);
  CHECK(payload_of_file(fetched(c.path / "restore", 5, 7)) == p1);
  // The sender serves the slots of its own regions too.
  TransferReport own =
      wait(newcomer.get({"127.0.0.1", sender.port()}, {{5, 4}}, 7, c.path / "own"));
  INFO(own.detail);
  REQUIRE(own.ok);
  CHECK(payload_of_file(fetched(c.path / "own", 5, 7)) == p1);
  // Asked for another world size's slot of that rank: none.
  CHECK_FALSE(wait(newcomer.get(to, {{4, 3}}, 7, c.path / "other")).ok);
  // The holder keeps the newest two steps per rank.
  make_region(a.path, 0, 4, 8, 1 << 20, 3);
  REQUIRE(put(sender, to, "node-a", a.path, {{0, 4}}, 8).ok);
  make_region(a.path, 0, 4, 9, 1 << 20, 4);
  REQUIRE(put(sender, to, "node-a", a.path, {{0, 4}}, 9).ok);
  // The sender keeps each step it staged until told which to drop.
  std::vector<int64_t> kept = kept_steps(a.path / "kept", 0);
  std::sort(kept.begin(), kept.end());
  CHECK(kept == std::vector<int64_t>{7, 8, 9});
  drop_kept(a.path / "kept", 0, {8, 9}, 0);
  kept = kept_steps(a.path / "kept", 0);
  std::sort(kept.begin(), kept.end());
  CHECK(kept == std::vector<int64_t>{8, 9});
  CHECK(kept_steps(a.path / "kept", 1) == std::vector<int64_t>{7});
  // A slot the worker no longer holds is not sent.
  TransferReport gone = put(sender, to, "node-a", a.path, {{0, 4}}, 8);
  CHECK_FALSE(gone.ok);
  CHECK_THAT(gone.detail, Catch::Contains("no longer holds step 8"));
  CHECK(gone.overtaken);  // (the replicator widens the stride for it)
  CHECK(holder.copies().steps() == Steps{{"node-a", {{8, 9}, {7}}}});
  // A step not held is a clear refusal.
  TransferReport none = wait(newcomer.get(to, {{5, 4}}, 9, c.path / "restore"));
  CHECK_FALSE(none.ok);
  CHECK_THAT(none.detail, Catch::Contains("no slot of global rank 5 of 4 at step 9 here"));
  // A put whose slot is another rank's than it says is refused.
  make_region(a.path, 2, 6, 10, 1 << 20, 5);
  TransferReport liar = put(sender, to, "node-a", a.path, {{2, 7}}, 10);
  CHECK_FALSE(liar.ok);
  CHECK_THAT(liar.detail, Catch::Contains("not a checkpoint of the rank it names"));
}

TEST_CASE(
    "peer copies: a put of the bytes the peer keeps of its own step sends no payload, and a get "
    "gives them back as the sender's rank",
    "[peer_copies]") {
  Folder a, b, c;
  auto holder = service(auth_with("0123456789abcdef-job"), b.path);
  auto sender = service(auth_with("0123456789abcdef-job"), a.path);
  // DDP's state: the same bytes on every node, each node's holder a rank of its own.
  const std::string same = make_region(a.path, 0, 2, 7, 3 << 20, 1);
  REQUIRE(make_region(b.path, 0, 0, 7, 3 << 20, 1) == same);
  // A rank whose state is its own (a referrer's slot, an FSDP shard).
  const std::string own = make_region(a.path, 1, 3, 7, 1 << 20, 2);
  make_region(b.path, 1, 1, 7, 1 << 20, 9);
  const PeerAddress to{"127.0.0.1", holder->port()};
  // The holder stages its own step as the sender's put arrives (every node stages the same steps,
  // a moment apart): the put waits for it rather than send what it will hold.
  asio::io_context io;
  auto holder_stage = asio::co_spawn(
      io, holder->stage(b.path, {{0, 0}, {1, 1}}, 7, b.path / "kept"), asio::use_future);
  std::thread stager([&] { io.run_for(std::chrono::seconds(60)); });
  TransferReport sent = put(*sender, to, "node-a", a.path, {{0, 2}, {1, 3}}, 7);
  stager.join();
  REQUIRE(holder_stage.get().ok);
  INFO(sent.detail);
  REQUIRE(sent.ok);
  CHECK(sent.held == (3u << 20));
  CHECK(sent.bytes == (1u << 20));  // only the rank whose bytes differ crossed
  CHECK(holder->copies().steps() == Steps{{"node-a", {{7}, {7}}}});
  // The copy held is the holder's own kept file under another name: its memory counted once.
  std::vector<PeerCopies::Copy> held = holder->copies().all();
  REQUIRE(held.size() == 2);
  const auto linked = std::find_if(held.begin(), held.end(), [](auto& h) { return h.rank == 2; });
  REQUIRE(linked != held.end());
  const fs::path kept_file = b.path / "kept" / "step_7" / "rank_0.ddpckpt";
  CHECK(stat_of(linked->file).st_ino == stat_of(kept_file).st_ino);
  CheckpointMemory node = checkpoint_memory(b.path);
  CHECK(node.peers == allocated_for(kRegionHeader + (1 << 20)));  // the other rank's copy alone
  // A node taking node-a's place gets global rank 2's state, recorded as rank 2's.
  auto newcomer = service(auth_with("0123456789abcdef-job"), c.path);
  TransferReport got = wait(newcomer->get(to, {{2, 4}, {3, 4}}, 7, c.path / "restore"));
  INFO(got.detail);
  REQUIRE(got.ok);
  CHECK(payload_of_file(fetched(c.path / "restore", 2, 7)) == same);
  CHECK(payload_of_file(fetched(c.path / "restore", 3, 7)) == own);
  std::ifstream in(fetched(c.path / "restore", 2, 7), std::ios::binary);
  std::string header(kRegionHeader, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header.size()));
  const std::optional<RegionHeader> h = parse_region_header(header);
  REQUIRE(h);
  CHECK(h->slots[0].rank == 2);
  // The holder drops its own step: the copy it holds for node-a stays, its memory its own now.
  drop_kept(b.path / "kept", 0, {}, 0);
  REQUIRE_FALSE(fs::exists(kept_file));
  node = checkpoint_memory(b.path);
  CHECK(node.peers ==
        allocated_for(kRegionHeader + (3 << 20)) + allocated_for(kRegionHeader + (1 << 20)));
  TransferReport again = wait(newcomer->get(to, {{2, 4}}, 7, c.path / "again"));
  REQUIRE(again.ok);
  CHECK(payload_of_file(fetched(c.path / "again", 2, 7)) == same);
}

TEST_CASE(
    "peer copies: room for a worker's save keeps a copy linked to a kept step until that step goes",
    "[peer_copies]") {
  Folder a, b;
  auto holder = service_of_a_job_without_a_token(b.path);
  auto sender = service_of_a_job_without_a_token(a.path);
  make_region(a.path, 0, 2, 3, 2 << 20, 1);
  make_region(a.path, 1, 3, 3, 1 << 20, 2);
  make_region(b.path, 0, 0, 3, 2 << 20, 1);
  REQUIRE(wait(holder->stage(b.path, {{0, 0}}, 3, b.path / "kept")).ok);
  TransferReport sent =
      put(*sender, {"127.0.0.1", holder->port()}, "a", a.path, {{0, 2}, {1, 3}}, 3);
  REQUIRE(sent.ok);
  REQUIRE(sent.held == (2u << 20));
  // Dropping the linked copy would free nothing: only the copy of its own memory goes.
  CHECK(holder->drop_oldest_copies(uint64_t{1} << 40) == allocated_for(kRegionHeader + (1 << 20)));
  CHECK(holder->copies().steps() == Steps{{"a", {{3}}}});
  // Once the kept step it links to is gone, its memory is its own, and it goes too.
  drop_kept(b.path / "kept", 0, {}, 0);
  CHECK(holder->drop_oldest_copies(uint64_t{1} << 40) == allocated_for(kRegionHeader + (2 << 20)));
  CHECK(holder->copies().steps().empty());
  CHECK(checkpoint_memory(b.path).peers == 0);
}

TEST_CASE(
    "peer copies: a put to a peer that holds no step of its own, or other bytes at that step, "
    "sends the payload at once",
    "[peer_copies]") {
  Folder a, b;
  auto holder = service_of_a_job_without_a_token(b.path);
  auto sender = service_of_a_job_without_a_token(a.path);
  make_region(a.path, 0, 2, 7, 1 << 20, 1);
  const PeerAddress to{"127.0.0.1", holder->port()};
  // No regions at all (a node whose workers never saved): nothing to wait for.
  auto began = std::chrono::steady_clock::now();
  TransferReport sent = put(*sender, to, "node-a", a.path, {{0, 2}}, 7);
  REQUIRE(sent.ok);
  CHECK(sent.bytes == (1u << 20));
  CHECK(sent.held == 0);
  CHECK(std::chrono::steady_clock::now() - began < std::chrono::seconds(2));
  // Its own step kept, one byte different.
  std::string other = make_region(b.path, 0, 0, 8, 1 << 20, 1);
  REQUIRE(wait(holder->stage(b.path, {{0, 0}}, 8, b.path / "kept")).ok);
  make_region(a.path, 0, 2, 8, 1 << 20, 2);
  began = std::chrono::steady_clock::now();
  sent = put(*sender, to, "node-a", a.path, {{0, 2}}, 8);
  REQUIRE(sent.ok);
  CHECK(sent.bytes == (1u << 20));
  CHECK(sent.held == 0);
  CHECK(std::chrono::steady_clock::now() - began < std::chrono::seconds(2));
  for (const PeerCopies::Copy& held : holder->copies().all()) {
    CHECK(stat_of(held.file).st_nlink == 1);
  }
  // Its workers saved the step but it keeps no copy of it (it skipped that window): the put waits
  // for one once (2 s), not again for the step's other ranks.
  make_region(b.path, 0, 0, 9, 1 << 20, 3);
  make_region(a.path, 0, 2, 9, 1 << 20, 3);
  make_region(a.path, 1, 3, 9, 1 << 20, 4);
  began = std::chrono::steady_clock::now();
  sent = put(*sender, to, "node-a", a.path, {{0, 2}, {1, 3}}, 9);
  const auto took = std::chrono::steady_clock::now() - began;
  REQUIRE(sent.ok);
  CHECK(sent.bytes == (2u << 20));
  CHECK(took >= std::chrono::seconds(2));
  CHECK(took < std::chrono::milliseconds(3900));
}

TEST_CASE(
    "peer copies: a copy that fails its checksum, or is cut short, leaves the previous one in "
    "force",
    "[peer_copies]") {
  Folder a, b;
  auto holder_ = service(auth_with("0123456789abcdef-job"), b.path);
  auto sender_ = service(auth_with("0123456789abcdef-job"), a.path);
  PeerService &holder = *holder_, &sender = *sender_;
  const PeerAddress to{"127.0.0.1", holder.port()};
  make_region(a.path, 0, 0, 5, 1 << 20, 1);
  REQUIRE(put(sender, to, "n", a.path, {{0, 0}}, 5).ok);
  make_region(a.path, 0, 0, 6, 1 << 20, 2, /*torn=*/true);
  TransferReport torn = put(sender, to, "n", a.path, {{0, 0}}, 6);
  CHECK_FALSE(torn.ok);  // found by the sender's own copy first: nothing sent
  CHECK_THAT(torn.detail, Catch::Contains("reused its slot of step 6 during the copy"));
  CHECK(kept_steps(a.path / "kept", 0) == std::vector<int64_t>{5});  // the step before stays
  CHECK(holder.copies().steps() == Steps{{"n", {{5}}}});

  // A sender that dies half way through its payload.
  asio::io_context io;
  std::string session;
  asio::ip::tcp::socket s = member_socket(io, holder.port(), &session);
  const std::string payload = payload_of(1 << 20, 3);
  const uint64_t words[] = {1, 0, 0, 7, kRegionHeader + payload.size(), 0, 1};
  const std::string request = std::string(reinterpret_cast<const char*>(words), sizeof words) + "n";
  const std::string header = region_header_for(record_of(payload, 7), payload.size(), 0);
  CopyMac header_mac(ddprun::store::Token("0123456789abcdef-job"), "checkpoints/job");
  const std::string nonce = header_mac.begin_sending();
  header_mac.add(session + request);
  header_mac.add(header);
  asio::write(s, asio::buffer(request + header + nonce + header_mac.finish()));
  char status[16];
  asio::read(s, asio::buffer(status));
  CopyMac payload_mac(ddprun::store::Token("0123456789abcdef-job"), "checkpoints/job");
  asio::write(s, asio::buffer(payload_mac.begin_sending()));
  asio::write(s, asio::buffer(payload.data(), payload.size() / 2));
  s.close();
  // The holder noticed (its read failed) and gave the room back: a whole copy of 7 goes in.
  make_region(a.path, 0, 0, 7, 1 << 20, 3);
  REQUIRE(put(sender, to, "n", a.path, {{0, 0}}, 7).ok);
  CHECK(holder.copies().steps() == Steps{{"n", {{5, 7}}}});
  CHECK(std::distance(fs::directory_iterator(b.path / "peers"), fs::directory_iterator()) == 2);
}

TEST_CASE(
    "peer copies: the memory limit holds on the peer: the older copy goes first, never the newest",
    "[peer_copies]") {
  Folder a, b;
  const uint64_t copy = kRegionHeader + (1 << 20);
  auto holder_ = service(auth_with("0123456789abcdef-job"), b.path, 2 * copy + 100);
  auto sender_ = service(auth_with("0123456789abcdef-job"), a.path);
  PeerService &holder = *holder_, &sender = *sender_;
  const PeerAddress to{"127.0.0.1", holder.port()};
  for (int64_t step = 1; step <= 4; ++step) {
    make_region(a.path, 0, 0, step, 1 << 20, static_cast<char>(step));
    REQUIRE(put(sender, to, "n", a.path, {{0, 0}}, step).ok);
    CHECK(holder.copies().bytes() <= 2 * copy + 100);
  }
  CHECK(holder.copies().steps() == Steps{{"n", {{3, 4}}}});
  // A second rank does not fit beside them: refused, naming the sizes; rank 0's copies stay.
  make_region(a.path, 1, 1, 4, 1 << 20, 9);
  TransferReport over = put(sender, to, "n", a.path, {{1, 1}}, 4);
  CHECK_FALSE(over.ok);
  CHECK_THAT(over.detail, Catch::Contains("its budget is"));
  CHECK(holder.copies().steps().at("n")[0] == std::vector<int64_t>{3, 4});
  // The node's own checkpoints count against the same budget: with a region of its own worker
  // beside them, a newer copy of rank 0 finds no room even once the older copy is gone.
  make_region(b.path, 0, 2, 1, 1 << 20, 7);
  make_region(a.path, 0, 0, 5, 1 << 20, 5);
  TransferReport crowded = put(sender, to, "n", a.path, {{0, 0}}, 5);
  CHECK_FALSE(crowded.ok);
  CHECK_THAT(crowded.detail, Catch::Contains("regions 1052672"));
  CHECK(holder.copies().steps().at("n")[0] == std::vector<int64_t>{4});
}

TEST_CASE("peer copies: a get from a holder that never answers ends at once when the agent stops",
          "[peer_copies]") {
  Folder c;
  // A "holder" whose port takes connections and never says a word.
  asio::io_context silent_io;
  asio::ip::tcp::acceptor silent(silent_io, {asio::ip::make_address("127.0.0.1"), 0});
  const PeerAddress from{"127.0.0.1", silent.local_endpoint().port()};
  auto newcomer_ = service(auth_with("0123456789abcdef-job"), c.path);
  PeerService& newcomer = *newcomer_;
  asio::io_context io;
  asio::cancellation_signal stop;
  bool ended = false;
  const auto started = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration took{};
  asio::co_spawn(
      io, newcomer.get(from, {{0, 4}}, 3, c.path / "restore"),
      asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr, TransferReport r) {
        ended = true;
        took = std::chrono::steady_clock::now() - started;
        CHECK_FALSE(r.ok);
      }));
  asio::steady_timer soon(io, std::chrono::milliseconds(300));
  soon.async_wait([&](boost::system::error_code) { stop.emit(asio::cancellation_type::terminal); });
  io.run_for(std::chrono::seconds(8));
  REQUIRE(ended);
  CHECK(took < std::chrono::seconds(2));  // not the link's 10 s idle limit
  CHECK_FALSE(fs::exists(fetched(c.path / "restore", 0, 3)));
}

namespace {

// Holds a copy of `origin`'s local rank `local`'s step `step` (`bytes` of payload) in `copies`,
// as a transfer sent in round `round` that arrived leaves it.
void hold_copy(PeerCopies& copies, const std::string& origin, int local, int64_t step, size_t bytes,
               int round = 0) {
  const std::string payload = payload_of(bytes, static_cast<char>(step));
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.step = step;
  rec.size = bytes;
  rec.checksum = payload_crc(payload);
  rec.sequence = 1;
  rec.world_size = 4;
  rec.rank = local;
  rec.run_tag = kRunTag;
  const std::string header = region_header_for(rec, bytes, 1000);
  std::unique_ptr<SlotFileWriter> w =
      copies.begin(origin, local, step, header, kRegionHeader + bytes);
  w->append(payload.data(), payload.size());
  REQUIRE(w->commit(rec.checksum));
  REQUIRE(copies.committed(origin, local, local, 4, step, kRegionHeader + bytes, round));
}

}  // namespace

TEST_CASE("peer copies: a copy sent before a restore's round is not kept after it", "[peer]") {
  Folder f;
  PeerCopies copies(f.path / "peers", std::nullopt);
  hold_copy(copies, "a", 0, 99, 1 << 20, 3);
  // Round 3's step 100 arrives; meanwhile round 4 restores step 99 (a rank failed before saving
  // 100): the copy, complete after the drop, is of the abandoned timeline.
  const std::string payload = payload_of(1 << 20, 'x');
  SlotRecord rec;
  rec.state = SlotRecord::kCommitted;
  rec.step = 100;
  rec.size = payload.size();
  rec.checksum = payload_crc(payload);
  rec.sequence = 2;
  rec.world_size = 4;
  rec.rank = 0;
  rec.run_tag = kRunTag;
  std::unique_ptr<SlotFileWriter> w =
      copies.begin("a", 0, 100, region_header_for(rec, 1 << 20, 1), kRegionHeader + payload.size());
  w->append(payload.data(), payload.size());
  REQUIRE(w->commit(rec.checksum));
  copies.drop_after(99, 4);
  CHECK_FALSE(copies.current(3));
  CHECK_FALSE(copies.committed("a", 0, 0, 4, 100, kRegionHeader + payload.size(), 3));
  CHECK_FALSE(copies.find("a", 0, 100));
  CHECK(copies.find("a", 0, 99));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(f.path / "peers")) files += e.is_regular_file();
  CHECK(files == 1);  // step 99's: the late copy's file went too
  CHECK(copies.bytes() == kRegionHeader + (1 << 20));
  // A copy of the new timeline (round 4's, or a later round's) is kept.
  CHECK(copies.current(4));
  hold_copy(copies, "a", 0, 100, 1 << 20, 4);
  CHECK(copies.find("a", 0, 100));
}

TEST_CASE(
    "peer copies: a put whose request reaches the peer only after a later round's restore there "
    "is refused and not kept",
    "[peer]") {
  Folder a, b;
  auto holder_ = service(auth_with("0123456789abcdef-job"), b.path);
  auto sender_ = service(auth_with("0123456789abcdef-job"), a.path);
  PeerService &holder = *holder_, &sender = *sender_;
  const PeerAddress to{"127.0.0.1", holder.port()};
  make_region(a.path, 0, 0, 5, 1 << 20, 1);
  REQUIRE(put(sender, to, "n", a.path, {{0, 0}}, 5, 2).ok);
  // Round 3 restores step 5 at the holder; the sender's round-2 put of step 6 (of the timeline
  // round 3 abandoned) comes only now: refused, whatever its step.
  holder.sources().drop_after(5, 3);
  make_region(a.path, 0, 0, 6, 1 << 20, 2);
  const TransferReport late = put(sender, to, "n", a.path, {{0, 0}}, 6, 2);
  CHECK_FALSE(late.ok);
  CHECK_THAT(late.detail, Catch::Contains("earlier round"));
  CHECK(holder.copies().steps() == Steps{{"n", {{5}}}});
  // Round 3's own step 6 is kept.
  REQUIRE(put(sender, to, "n", a.path, {{0, 0}}, 6, 3).ok);
  CHECK(holder.copies().steps() == Steps{{"n", {{5, 6}}}});
}

TEST_CASE("peer copies: room for a worker's save drops the copies held, the oldest step first",
          "[peer]") {
  Folder f;
  PeerCopies copies(f.path / "peers", std::nullopt);
  hold_copy(copies, "a", 0, 4, 1 << 20);
  hold_copy(copies, "a", 0, 5, 1 << 20);
  hold_copy(copies, "b", 1, 3, 1 << 20);
  const uint64_t one = allocated_for(kRegionHeader + (1 << 20));
  // A little more than one copy's room: the two oldest steps go (b's 3, then a's 4), not a's 5.
  CHECK(copies.drop_oldest(one + 1) == 2 * one);
  REQUIRE(copies.all().size() == 1);
  CHECK(copies.all()[0].step == 5);
  CHECK(!fs::exists(f.path / "peers" / "62.rank1.step3.ddpckpt"));
  CHECK(copies.bytes() == kRegionHeader + (1 << 20));
  // More than everything held: all of it, and what it freed.
  CHECK(copies.drop_oldest(uint64_t{1} << 40) == one);
  CHECK(copies.all().empty());
  CHECK(copies.bytes() == 0);
}

TEST_CASE(
    "peer copies: a get writes over the pages a node holds beforehand, the best fitting first, "
    "whatever they held, and into new pages once there are none",
    "[peer]") {
  Folder a, c;
  auto sender_ = service(auth_with("0123456789abcdef-job"), a.path);
  auto newcomer_ = service(auth_with("0123456789abcdef-job"), c.path);
  const std::string p0 = make_region(a.path, 0, 4, 7, 3 << 20, 1);
  const std::string p1 = make_region(a.path, 1, 5, 7, 1 << 20, 2);
  const PeerAddress from{"127.0.0.1", sender_->port()};
  // A spare's restore room, a file of rank 4's size, and a dropped copy's pages far larger than
  // rank 5's, full of other bytes.
  const std::atomic<bool> go{false};
  const fs::path spares = spares_of(c.path / "kept");
  fs::create_directories(c.path / "kept");
  REQUIRE(make_spare(spares, c.path / "kept" / ".room.tmp", kRegionHeader + (3 << 20), go));
  std::ofstream(spares / "old", std::ios::binary) << std::string(16 << 20, '\xff');
  const TransferReport got = wait(newcomer_->get(from, {{4, 4}, {5, 4}}, 7, c.path / "restore"));
  INFO(got.detail);
  REQUIRE(got.ok);
  // Rank 4's 3 MiB into the file of its size, rank 5's MiB into the large one (given back down
  // to its size): each file exactly a header and its payload, the checksums held.
  CHECK(got.over_held_pages == (3u << 20) + (1u << 20));
  CHECK(spare_sizes(spares).empty());
  CHECK(payload_of_file(fetched(c.path / "restore", 4, 7)) == p0);
  CHECK(payload_of_file(fetched(c.path / "restore", 5, 7)) == p1);
  CHECK(fs::file_size(fetched(c.path / "restore", 4, 7)) == kRegionHeader + (3 << 20));
  CHECK(fs::file_size(fetched(c.path / "restore", 5, 7)) == kRegionHeader + (1 << 20));
  CHECK(file_memory(fetched(c.path / "restore", 5, 7)) == allocated_for(kRegionHeader + (1 << 20)));
  // A spare short of the file: its pages written over, the rest taken as the bytes come; only
  // what it held counts as held.
  REQUIRE(make_spare(spares, c.path / "kept" / ".room.tmp", 512 << 10, go));
  const TransferReport short_one = wait(newcomer_->get(from, {{5, 4}}, 7, c.path / "short"));
  REQUIRE(short_one.ok);
  CHECK(short_one.over_held_pages == (512 << 10) - kRegionHeader);
  CHECK(payload_of_file(fetched(c.path / "short", 5, 7)) == p1);
  // No spare left: new pages.
  const TransferReport again = wait(newcomer_->get(from, {{5, 4}}, 7, c.path / "again"));
  REQUIRE(again.ok);
  CHECK(again.over_held_pages == 0);
  CHECK(payload_of_file(fetched(c.path / "again", 5, 7)) == p1);
}
