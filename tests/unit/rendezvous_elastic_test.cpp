// The elastic handler in-process (rendezvous_job.hpp): rounds, spares, failures, the exit barrier,
// worker stores, store restarts and the leader.
#include "rendezvous_job.hpp"

using namespace rendezvous_test;

TEST_CASE("rendezvous: MAX nodes form a round at once, ranks in join order", "[rendezvous]") {
  Job job(2, 3);
  auto a = job.add(1);
  auto b = job.add(2);
  auto c = job.add(3);
  const auto started = Clock::now();
  const auto rounds = form(job, {a, b, c});
  CHECK(Clock::now() - started < 5s);  // far below the 60 s last call: MAX ends it
  std::set<int> node_ranks;
  for (const auto& r : rounds) {
    CHECK(r.number == 0);
    CHECK(r.restart_count == 0);
    CHECK(r.num_nodes == 3);
    CHECK(r.world_size == 6);
    node_ranks.insert(r.node_rank);
  }
  CHECK(node_ranks == std::set<int>{0, 1, 2});
  // Base ranks follow node ranks: each node's ranks start where the previous node's end.
  std::vector<std::pair<int, int>> by_rank;  // node rank -> (base rank, nproc)
  const int nprocs[] = {1, 2, 3};
  for (size_t i = 0; i < rounds.size(); ++i) by_rank.emplace_back(rounds[i].node_rank, i);
  std::sort(by_rank.begin(), by_rank.end());
  int expected_base = 0;
  for (const auto& [rank, i] : by_rank) {
    CHECK(rounds[i].base_rank == expected_base);
    expected_base += nprocs[i];
  }
  CHECK(expected_base == 6);
}

TEST_CASE("rendezvous: MIN nodes form a round when the last call ends", "[rendezvous]") {
  Job job(2, 3);
  job.config().last_call_timeout = 200ms;
  auto a = job.add();
  auto b = job.add();
  const auto started = Clock::now();
  const auto rounds = form(job, {a, b});
  CHECK(Clock::now() - started >= 150ms);
  CHECK(rounds[0].num_nodes == 2);
  CHECK(rounds[0].world_size == 2);
}

TEST_CASE(
    "rendezvous: a node beyond MAX waits as a spare, says so to its agent, and replaces a dead "
    "node",
    "[rendezvous]") {
  Job job(2, 2);
  auto a = job.add();
  auto b = job.add();
  int members_told = 0, spare_told = 0;
  for (auto& n : {a, b}) n->on_spare([&] { ++members_told; });
  auto r0 = form(job, {a, b});
  auto spare = job.add();
  spare->on_spare([&] { ++spare_told; });
  auto spare_round = job.start(spare->next_round());
  job.idle_for(200ms);
  CHECK_FALSE(spare_round->done);
  CHECK(spare_told == 1);  // as it began to wait (its agent starts standbys then)

  auto why = job.start(a->interruption(r0[0]));
  b->abandon();  // b's agent dies: its connections close
  REQUIRE(job.run_until([&] { return why->done; }));
  CHECK_THAT(why->get(), Catch::Contains("left the job"));
  job.run(completed(a->end_round(r0[0], false)));

  auto next_a = job.start(a->next_round());
  REQUIRE(job.run_until([&] { return next_a->done && spare_round->done; }));
  const Round ra = *next_a->get(), rs = *spare_round->get();
  CHECK(ra.number == 1);
  CHECK(ra.restart_count == 0);  // a membership change costs no restart
  CHECK(ra.node_rank == 0);      // the survivor keeps its place
  CHECK(rs.node_rank == 1);
  CHECK(rs.num_nodes == 2);
  CHECK(spare_told == 1);
  CHECK(members_told == 0);
}

TEST_CASE(
    "rendezvous: a node joining in place of a lost one takes its ranks, the survivors keep theirs",
    "[rendezvous]") {
  Job job(3, 3);
  auto a = job.add(2);
  auto b = job.add(2);
  auto c = job.add(2);
  const auto r0 = form(job, {a, b, c});
  const auto rank_of = [](const std::vector<Round>& rounds, size_t i) {
    return rounds[i].node_rank;
  };
  REQUIRE(rank_of(r0, 0) == 0);
  REQUIRE(rank_of(r0, 1) == 1);
  REQUIRE(rank_of(r0, 2) == 2);
  // The middle node is lost; a replacement joins.
  auto why = job.start(a->interruption(r0[0]));
  b->abandon();
  REQUIRE(job.run_until([&] { return why->done; }));
  job.run(completed(a->end_round(r0[0], false)));
  job.run(completed(c->end_round(r0[2], false)));
  auto d = job.add(2);
  const auto r1 = form(job, {a, c, d});
  CHECK(r1[0].node_rank == 0);  // a
  CHECK(r1[1].node_rank == 2);  // c keeps ranks 4-5, not 2-3
  CHECK(r1[1].base_rank == 4);
  CHECK(r1[2].node_rank == 1);  // d takes b's place and ranks 2-3
  CHECK(r1[2].base_rank == 2);
}

TEST_CASE("rendezvous: a newcomer below MAX ends the round, survivors keep their ranks",
          "[rendezvous]") {
  Job job(2, 3);
  job.config().last_call_timeout = 100ms;
  auto a = job.add();
  auto b = job.add();
  auto r0 = form(job, {a, b});
  auto why = job.start(a->interruption(r0[0]));
  auto c = job.add();
  REQUIRE(job.run_until([&] { return why->done; }));
  CHECK_THAT(why->get(), Catch::Contains("scale-up"));
  job.run(completed(a->end_round(r0[0], false)));
  job.run(completed(b->end_round(r0[1], false)));  // a no-op: a ended it already
  const auto r1 = form(job, {a, b, c});
  CHECK(r1[0].number == 1);
  CHECK(r1[0].node_rank == r0[0].node_rank);
  CHECK(r1[1].node_rank == r0[1].node_rank);
  CHECK(r1[2].node_rank == 2);
  CHECK(r1[2].world_size == 3);
}

TEST_CASE("rendezvous: a failure costs the job one restart, however many nodes report it",
          "[rendezvous]") {
  Job job(2, 2);
  job.config().max_restarts = 1;
  auto a = job.add();
  auto b = job.add();
  auto r0 = form(job, {a, b});
  job.run(completed(failure_reports::report(a, r0[0], "a0")));
  job.run(completed(failure_reports::report(b, r0[1], "b0")));
  auto r1 = form(job, {a, b});
  CHECK(r1[0].number == 1);
  CHECK(r1[0].restart_count == 1);
  CHECK(r1[1].restart_count == 1);

  job.run(completed(failure_reports::report(b, r1[1], "b1")));
  job.run(completed(failure_reports::report(a, r1[0], "a1")));
  for (auto& node : {a, b}) {
    CHECK_FALSE(job.run(node->next_round()).has_value());
    CHECK(node->ending().kind == JobEnd::Kind::kRestartsExhausted);
    CHECK(failures_of(job, node, 1) == std::vector<std::string>{"a1", "b1"});
    CHECK(failures_of(job, node, 0) == std::vector<std::string>{"a0", "b0"});
  }
}

TEST_CASE("rendezvous: a closed job turns later joiners away", "[rendezvous]") {
  Job job(2, 3);
  job.config().last_call_timeout = 100ms;
  auto a = job.add();
  auto b = job.add();
  auto r0 = form(job, {a, b});
  auto done_a = job.start(a->exit_barrier(r0[0]));
  auto done_b = job.start(b->exit_barrier(r0[1]));
  REQUIRE(job.run_until([&] { return done_a->done && done_b->done; }));
  CHECK(done_a->get());
  CHECK(done_b->get());
  job.run(completed(a->close("succeeded")));
  CHECK(a->ending().kind == JobEnd::Kind::kSucceeded);

  auto late = job.add();
  CHECK_FALSE(job.run(late->next_round()).has_value());
  CHECK(late->ending().kind == JobEnd::Kind::kClosed);
  CHECK(late->ending().why == "succeeded");
}

TEST_CASE("rendezvous: the exit barrier fails at once when a peer's agent dies", "[rendezvous]") {
  Job job(2, 2);
  auto a = job.add();
  auto b = job.add();
  auto r0 = form(job, {a, b});
  auto done = job.start(a->exit_barrier(r0[0]));
  job.idle_for(50ms);
  CHECK_FALSE(done->done);
  const auto killed = Clock::now();
  b->abandon();
  REQUIRE(job.run_until([&] { return done->done; }));
  CHECK_FALSE(done->get());
  CHECK(Clock::now() - killed < 5s);  // not the 60 s barrier timeout
}

TEST_CASE("rendezvous: each round's node 0 hosts a fresh worker store", "[rendezvous]") {
  Job job(2, 2);
  auto a = job.add();
  auto b = job.add();
  auto r0 = form(job, {a, b});
  auto wa = job.start(a->worker_store(r0[0]));
  auto wb = job.start(b->worker_store(r0[1]));
  REQUIRE(job.run_until([&] { return wa->done && wb->done; }));
  const auto a0 = wa->get(), b0 = wb->get();  // (get() moves the value out: once each)
  REQUIRE(a0);
  REQUIRE(b0);
  const WorkerStoreAddress s0 = *a0;
  CHECK(s0.addr == "127.0.0.1");
  CHECK(b0->port == s0.port);
  CHECK(s0.port != job.port());

  job.run(completed(a->end_round(r0[0], false)));
  auto r1 = form(job, {a, b});
  auto wa1 = job.start(a->worker_store(r1[0]));
  auto wb1 = job.start(b->worker_store(r1[1]));
  REQUIRE(job.run_until([&] { return wa1->done && wb1->done; }));
  const auto a1 = wa1->get(), b1 = wb1->get();
  REQUIRE(a1);
  REQUIRE(b1);
  CHECK(a1->port == b1->port);
  CHECK(a1->port != s0.port);
}

TEST_CASE("rendezvous: a round's worker store is waited for only while the round lasts",
          "[rendezvous]") {
  Job job(2, 2);
  auto a = job.add();
  auto b = job.add();
  auto r0 = form(job, {a, b});
  // Node 0 moves on without publishing (another reason ended the round for it first).
  const auto [zero, other] = node_zero_first(r0);
  std::vector<std::shared_ptr<Rendezvous>> nodes = {a, b};
  auto waiting = job.start(nodes[other]->worker_store(r0[other]));
  job.idle_for(100ms);
  CHECK_FALSE(waiting->done);
  job.run(completed(nodes[zero]->end_round(r0[zero], false)));
  REQUIRE(job.run_until([&] { return waiting->done; }));  // at once, not at the join timeout
  CHECK_FALSE(waiting->get().has_value());
  CHECK_THAT(job.run(nodes[other]->interruption(r0[other])), Catch::Contains("went on to round 1"));

  // Node 0 of the next round dies before publishing: the wait ends when the leader sees it go.
  auto r1 = form(job, nodes);
  const auto [dead, survivor] = node_zero_first(r1);
  auto waiting1 = job.start(nodes[survivor]->worker_store(r1[survivor]));
  job.idle_for(100ms);
  CHECK_FALSE(waiting1->done);
  nodes[dead]->abandon();
  REQUIRE(job.run_until([&] { return waiting1->done; }));
  CHECK_FALSE(waiting1->get().has_value());
  CHECK_THAT(job.run(nodes[survivor]->interruption(r1[survivor])), Catch::Contains("left the job"));
}

TEST_CASE(
    "rendezvous: no member starts a round's workers before every member stopped its earlier ones",
    "[rendezvous]") {
  Job job(2, 4);
  job.config().last_call_timeout = 100ms;
  auto a = job.add();
  auto b = job.add();
  auto c = job.add();
  auto r0 = form(job, {a, b, c});
  // A newcomer ends round 0. c does not hear of it (cut off from the store, its round-0 workers
  // still running) but is still present, so round 1 counts on it.
  auto d = job.add();
  CHECK_THAT(job.run(a->interruption(r0[0])), Catch::Contains("scale-up"));
  job.run(completed(a->end_round(r0[0], false)));
  job.run(completed(b->end_round(r0[1], false)));
  const std::vector<std::shared_ptr<Rendezvous>> live = {a, b, d};
  const auto r1 = form(job, live);
  REQUIRE(r1[0].num_nodes == 4);
  std::vector<std::shared_ptr<Pending<std::optional<WorkerStoreAddress>>>> stores;
  for (size_t i = 0; i < live.size(); ++i)
    stores.push_back(job.start(live[i]->worker_store(r1[i])));
  job.idle_for(300ms);
  for (auto& s : stores) CHECK_FALSE(s->done);  // node 0 has not published: c's old workers run
  // c comes back, stops its round-0 workers and joins round 1: now the round's workers may start.
  const auto rc = form(job, {c});
  stores.push_back(job.start(c->worker_store(rc[0])));
  REQUIRE(job.run_until(
      [&] { return std::all_of(stores.begin(), stores.end(), [](auto& s) { return s->done; }); }));
  const auto first = stores[0]->get();
  REQUIRE(first.has_value());
  for (auto& s : stores) {
    const auto got = s->get();
    REQUIRE(got.has_value());
    CHECK(got->port == first->port);
  }
}

TEST_CASE(
    "rendezvous: a node outside the round saying under its number that its workers stopped does "
    "not start the round's workers",
    "[rendezvous]") {
  Job job(2, 2);
  auto a = job.add();
  auto b = job.add();
  const auto r0 = form(job, {a, b});
  const auto [zero, other] = node_zero_first(r0);
  const std::vector<std::shared_ptr<Rendezvous>> nodes = {a, b};
  // A node of another membership numbered 0 (put back after a store restart) said so.
  auto stale = job.client();
  const std::string key = TcpJobStore::job_key("job", "ready/0/stale");
  job.run(completed(stale->set(key, "")));
  auto first = job.start(nodes[zero]->worker_store(r0[zero]));
  job.idle_for(300ms);
  CHECK_FALSE(first->done);  // the other member has not said so
  auto second = job.start(nodes[other]->worker_store(r0[other]));
  REQUIRE(job.run_until([&] { return first->done && second->done; }));
  CHECK(first->get().has_value());
  CHECK(second->get().has_value());
  stale->close();
}

TEST_CASE("rendezvous: a restarted store is refilled; a peer that does not come back is gone",
          "[rendezvous]") {
  Job job(2, 3);
  job.config().heartbeat_timeout = 1s;
  auto a = job.add();
  auto b = job.add();
  auto c = job.add();
  auto r0 = form(job, {a, b, c});
  auto why_a = job.start(a->interruption(r0[0]));
  auto why_b = job.start(b->interruption(r0[1]));
  job.idle_for(50ms);
  const auto restarted = Clock::now();
  job.restart_store();
  c->abandon();  // c's agent dies while the store is down: it never comes back
  // a and b reconnect, put the job's keys back, and give c its heartbeat timeout to return.
  REQUIRE(job.run_until([&] { return why_a->done && why_b->done; }));
  CHECK(Clock::now() - restarted >= 1s);
  CHECK_THAT(why_a->get(), Catch::Contains("node " + id_of(c) + " left the job"));
  CHECK_THAT(why_b->get(), Catch::Contains("node " + id_of(c) + " left the job"));
  auto client = job.client();
  for (const char* key : {"settings", "round", "restarts", "rounds/0"}) {
    INFO(key);
    CHECK(job.run(client->check({TcpJobStore::job_key("job", key)})));
  }
  // The survivors go on without a restart.
  job.run(completed(a->end_round(r0[0], false)));
  const auto r1 = form(job, {a, b});
  CHECK(r1[0].number == 1);
  CHECK(r1[0].restart_count == 0);
  CHECK(r1[0].num_nodes == 2);
  client->close();
  // The leader (the first to join) claimed its place again in the new store.
  CHECK(job.leader() == id_of(a));
}

TEST_CASE("rendezvous: after a store restart no round forms around a node not heard from since",
          "[rendezvous]") {
  Job job(2, 4);
  job.config().heartbeat_timeout = 1s;
  job.config().last_call_timeout = 100ms;
  auto a = job.add();
  auto b = job.add();
  auto c = job.add();
  auto r0 = form(job, {a, b, c});
  job.restart_store();
  c->abandon();  // cut off (or dead) while the store restarts: its peers keep it for a heartbeat
  auto client = job.client();
  REQUIRE(job.run_until([&] {
    return job.run(client->check({TcpJobStore::job_key("job", "rounds/0")})) &&
           job.run(client->check({TcpJobStore::job_key("job", "leader")}));
  }));
  client->close();
  // A newcomer ends round 0 while c is still inside that heartbeat: the next round must not count
  // on c, whose workers may still run round 0.
  const auto joined = Clock::now();
  auto d = job.add();
  CHECK_THAT(job.run(a->interruption(r0[0])), Catch::Contains("scale-up"));
  job.run(completed(a->end_round(r0[0], false)));
  job.run(completed(b->end_round(r0[1], false)));
  const auto r1 = form(job, {a, b, d});
  CHECK(r1[0].num_nodes == 3);
  CHECK(r1[0].restart_count == 0);
  CHECK(Clock::now() - joined < 3s);  // c's heartbeat, not a timeout
}

TEST_CASE("rendezvous: when the leader dies another agent leads and the job re-forms without it",
          "[rendezvous]") {
  Job job(2, 3);
  auto a = job.add();  // the first to join leads
  auto b = job.add();
  auto c = job.add();
  auto r0 = form(job, {a, b, c});
  CHECK(job.leader() == id_of(a));
  auto why_b = job.start(b->interruption(r0[1]));
  auto why_c = job.start(c->interruption(r0[2]));
  a->abandon();
  REQUIRE(job.run_until([&] { return why_b->done && why_c->done; }));
  CHECK_THAT(why_b->get(), Catch::Contains("node " + id_of(a) + " left the job"));
  CHECK_THAT(why_c->get(), Catch::Contains("node " + id_of(a) + " left the job"));
  job.run(completed(b->end_round(r0[1], false)));
  job.run(completed(c->end_round(r0[2], false)));
  const auto r1 = form(job, {b, c});
  CHECK(r1[0].num_nodes == 2);
  CHECK(r1[0].restart_count == 0);
  CHECK(std::set<int>{r1[0].node_rank, r1[1].node_rank} == std::set<int>{0, 1});
  const std::string leader = job.leader();
  CHECK((leader == id_of(b) || leader == id_of(c)));
}

TEST_CASE("rendezvous: a leader lost while the store restarts is replaced after its heartbeat",
          "[rendezvous]") {
  Job job(2, 3);
  job.config().heartbeat_timeout = 1s;
  auto a = job.add();  // the leader
  auto b = job.add();
  auto c = job.add();
  auto r0 = form(job, {a, b, c});
  auto why_b = job.start(b->interruption(r0[1]));
  auto why_c = job.start(c->interruption(r0[2]));
  job.idle_for(50ms);
  job.restart_store();
  a->abandon();  // never comes back: its claim is held for it for a heartbeat, then taken over
  REQUIRE(job.run_until([&] { return why_b->done && why_c->done; }));
  // Only the leader knew the round's members: the new one ends the round it cannot check.
  CHECK_THAT(why_b->get(), Catch::Contains("leader did not come back"));
  CHECK_THAT(why_c->get(), Catch::Contains("leader did not come back"));
  job.run(completed(b->end_round(r0[1], false)));
  const auto r1 = form(job, {b, c});
  CHECK(r1[0].num_nodes == 2);
  CHECK(r1[0].restart_count == 0);
}

TEST_CASE("rendezvous: a node's join costs the agents already there nothing", "[rendezvous]") {
  // Only the leader follows the presence keys: what the store sends for one more spare stays the
  // same however many agents are there (each used to get every join, so it grew with them).
  Job job(2, 2);
  auto a = job.add();
  auto b = job.add();
  form(job, {a, b});
  std::vector<uint64_t> cost;
  std::vector<std::shared_ptr<Pending<std::optional<Round>>>> spares;
  for (int i = 0; i < 24; ++i) {
    const uint64_t before = job.bytes_sent();
    auto spare = job.add();
    spares.push_back(job.start(spare->next_round()));  // placed as a spare by the leader
    job.idle_for(20ms);
    cost.push_back(job.bytes_sent() - before);
  }
  INFO("bytes sent for the 2nd..4th spare: " << cost[1] << " " << cost[2] << " " << cost[3]
                                             << "; for the last three: " << cost[21] << " "
                                             << cost[22] << " " << cost[23]);
  const uint64_t early = std::max({cost[1], cost[2], cost[3]});
  const uint64_t late = std::max({cost[21], cost[22], cost[23]});
  CHECK(late < early + early / 4);
  for (auto& s : spares) CHECK_FALSE(s->done);  // spares wait: the round is full
}
