// The round-scoped exchange (Rendezvous::publish, gather, raise) in-process, on the static and the
// elastic handler over one real store (rendezvous_job.hpp): what every node reads, how long it
// waits, what a flag does to the round on the other nodes.
#include "rendezvous_job.hpp"

#include "ddprun/rendezvous/exchange_book.hpp"

#include "exchanges/checkpoint_sources.hpp"
#include "exchanges/copy_board.hpp"

using namespace rendezvous_test;

namespace {

// Static node `rank` of `job`, over its store, not joined yet.
std::shared_ptr<Rendezvous> static_node(Job& job, int rank) {
  RendezvousConfig c = job.config();
  c.backend = Backend::kStatic;
  c.master_addr = "127.0.0.1";
  c.store_port = job.port();
  c.node_rank = rank;
  TcpJobStoreSpec spec{c.run_id, "127.0.0.1", job.port(), c.join_timeout, c.heartbeat_timeout};
  auto store = std::make_shared<TcpJobStore>(job.io().get_executor(), spec);
  return StaticRendezvous::create(job.io(), c, store, nullptr);
}

// Two static nodes (ranks 0 and 1) of `job`, joined.
std::vector<std::shared_ptr<Rendezvous>> static_nodes(Job& job) {
  std::vector<std::shared_ptr<Rendezvous>> nodes;
  for (int rank : {0, 1}) {
    nodes.push_back(static_node(job, rank));
    job.adopt(nodes.back());
  }
  return nodes;
}

std::vector<std::shared_ptr<Rendezvous>> elastic_nodes(Job& job) { return {job.add(), job.add()}; }

}  // namespace

TEST_CASE("rendezvous: the exchange: every node reads every node's value, and a wait is bounded",
          "[rendezvous][exchange]") {
  Job job(2, 2);
  const bool elastic = GENERATE(false, true);
  CAPTURE(elastic);
  auto nodes = elastic ? elastic_nodes(job) : static_nodes(job);
  auto r0 = form(job, nodes);
  const Scope scope = Scope::of(r0[0]);
  CHECK(scope == Scope::of(r0[1]));
  job.run(completed(nodes[0]->publish(scope, "topic", "from 0")));
  // Only one of the two has published: the wait ends at its bound, with what came.
  const auto start = Clock::now();
  CHECK(job.run(nodes[1]->gather(scope, "topic", 2, 200ms)) == std::vector<std::string>{"from 0"});
  CHECK(Clock::now() - start >= 200ms);
  // A gather waiting for both completes when the second value comes, long before its bound.
  auto both = job.start(nodes[0]->gather(scope, "topic", 2, 60s));
  job.run(completed(nodes[1]->publish(scope, "topic", "from 1")));
  REQUIRE(job.run_until([&] { return both->done; }));
  auto values = both->get();
  std::sort(values.begin(), values.end());
  CHECK(values == std::vector<std::string>{"from 0", "from 1"});
  // Another topic, another round's scope: nothing of this one.
  CHECK(job.run(nodes[1]->gather(scope, "other", 0, 0ms)).empty());
  CHECK(job.run(nodes[1]->gather(Scope::restart(7), "topic", 0, 0ms)).empty());
  // A gather in a round's scope ends when the round does, long before its bound.
  auto late = job.start(nodes[0]->gather(scope, "late", 2, 60s));
  job.run(completed(nodes[0]->publish(scope, "late", "only 0")));
  job.run(completed(nodes[1]->end_round(r0[1], true)));
  REQUIRE(job.run_until([&] { return late->done; }));
  CHECK(late->get() == std::vector<std::string>{"only 0"});
}

TEST_CASE("rendezvous: the exchange: two gathers of new topics begun at once both hear every value",
          "[rendezvous][exchange]") {
  Job job(2, 2);
  auto nodes = elastic_nodes(job);  // (a static node watches every key: it follows no topic)
  const Scope scope = Scope::of(form(job, nodes)[0]);
  // Each follows its topic anew, both while the other's watch is being made (a round's checkpoint
  // stride and its roles do). The values come once both watches stand: a second here lets them be
  // made (where it is too short, the test is weaker, never wrong).
  auto first = job.start(nodes[1]->gather(scope, "first", 2, 60s));
  auto second = job.start(nodes[1]->gather(scope, "second", 2, 60s));
  rendezvous_test::run_until(
      job.io(), [] { return false; }, 1s);
  job.run(completed(nodes[1]->publish(scope, "first", "1")));
  job.run(completed(nodes[1]->publish(scope, "second", "1")));
  job.run(completed(nodes[0]->publish(scope, "first", "0")));
  job.run(completed(nodes[0]->publish(scope, "second", "0")));
  // (Within run_until's 5 s, far from the gathers' bound: each heard the other node's value.)
  REQUIRE(job.run_until([&] { return first->done && second->done; }));
  CHECK(first->get().size() == 2);
  CHECK(second->get().size() == 2);
}

TEST_CASE(
    "rendezvous: the exchange: a flag interrupts the round on the other nodes and costs a restart",
    "[rendezvous][exchange]") {
  Job job(2, 2);
  job.config().max_restarts = 3;
  const bool elastic = GENERATE(false, true);
  CAPTURE(elastic);
  auto nodes = elastic ? elastic_nodes(job) : static_nodes(job);
  auto r0 = form(job, nodes);
  auto why = job.start(nodes[1]->interruption(r0[1]));
  job.run(completed(nodes[0]->raise(Scope::of(r0[0]), "hang", "a rank of node x is hung", "d")));
  job.run(completed(nodes[1]->raise(Scope::of(r0[1]), "hang", "second", "")));  // the first stays
  REQUIRE(job.run_until([&] { return why->done; }));
  CHECK(why->get() == "a rank of node x is hung");
  const auto flag = nodes[1]->raised(Scope::of(r0[1]), "hang");
  REQUIRE(flag.has_value());
  CHECK_FALSE(flag->mine);
  CHECK(flag->detail == "d");
  CHECK(nodes[0]->raised(Scope::of(r0[0]), "hang")->mine);
  // The node that raised it fails; the other ends the round for the flag: one restart in all.
  job.run(completed(failure_reports::report(nodes[0], r0[0], "[]")));
  job.run(completed(nodes[1]->end_round(r0[1], false)));
  auto r1 = form(job, nodes);
  CHECK(r1[0].restart_count == 1);
  CHECK(r1[1].restart_count == 1);
  // The next round starts with no flag raised.
  CHECK_FALSE(nodes[1]->raised(Scope::of(r1[1]), "hang").has_value());
}

TEST_CASE("rendezvous: the exchange: a node that has not joined raises nothing", "[rendezvous]") {
  Job job(2, 2);
  auto node = static_node(job, 0);
  REQUIRE(job.run(completed(node->raise(Scope::job(), "stop", "node 0 was stopped", "15"))));
  CHECK_FALSE(node->raised(Scope::job(), "stop").has_value());
  node->abandon();
}

TEST_CASE(
    "rendezvous: the exchange: a flagged round spends its restart even where the flagged node's "
    "leaving ends it first",
    "[rendezvous][exchange]") {
  Job job(2, 3);
  job.config().max_restarts = 3;
  std::vector<std::shared_ptr<Rendezvous>> nodes = {job.add(), job.add(), job.add()};
  auto r0 = form(job, nodes);
  // Node 1 names node 2 (a slow node replaced); node 2 leaves before anyone ends the round, so
  // the leader ends it for the leaving: the round after still counts one restart.
  auto over = job.start(nodes[1]->interruption(r0[1]));  // its own flag does not end its wait
  job.run(completed(nodes[1]->raise(Scope::of(r0[1]), "straggler", "node 2 is slow", "2")));
  job.run(completed(nodes[2]->leave(false)));
  REQUIRE(job.run_until([&] { return over->done; }));
  CHECK_THAT(over->get(), Catch::Contains("left the job"));
  auto r1 = form(job, {nodes[0], nodes[1]});
  CHECK(r1[0].num_nodes == 2);
  CHECK(r1[0].restart_count == 1);
  CHECK(r1[1].restart_count == 1);
}

TEST_CASE(
    "rendezvous: the exchange: nodes that decided different checkpoint steps, or did not say, "
    "start no worker, and the round's flag says so",
    "[rendezvous][exchange]") {
  using ddprun::agent::checkpoint_sources::Outcome;
  using ddprun::agent::checkpoint_sources::same_outcome;
  const auto both = [](Job& job, const std::vector<std::shared_ptr<Rendezvous>>& nodes,
                       const std::vector<Round>& r, std::optional<int64_t> a,
                       std::optional<int64_t> b) {
    auto first = job.start(same_outcome(nodes[0], r[0], a, 5s));
    auto second = job.start(same_outcome(nodes[1], r[1], b, 5s));
    REQUIRE(job.run_until([&] { return first->done && second->done; }));
    return std::make_pair(first->get(), second->get());
  };
  {
    Job job(2, 2);
    auto nodes = elastic_nodes(job);
    auto r = form(job, nodes);
    CHECK(both(job, nodes, r, 12, 12) == std::make_pair(Outcome::kSame, Outcome::kSame));
    CHECK_FALSE(nodes[0]->raised(Scope::of(r[0]), "checkpoint_outcome").has_value());
  }
  {
    Job job(2, 2);
    auto nodes = elastic_nodes(job);
    auto r = form(job, nodes);
    // Node 0 restores step 12, node 1 nothing (its gather came back short): neither starts.
    CHECK(both(job, nodes, r, 12, std::nullopt) ==
          std::make_pair(Outcome::kNotSame, Outcome::kNotSame));
    const auto flag = nodes[1]->raised(Scope::of(r[1]), "checkpoint_outcome");
    REQUIRE(flag.has_value());
    CHECK_THAT(flag->reason, Catch::Contains("did not decide on the same checkpoint step"));
  }
  {
    Job job(2, 2);
    auto nodes = elastic_nodes(job);
    auto r = form(job, nodes);
    // Node 1 never says: node 0's wait ends at its bound, and it starts nothing.
    CHECK(job.run(same_outcome(nodes[0], r[0], 12, 200ms)) == Outcome::kNotSame);
    CHECK(nodes[0]->raised(Scope::of(r[0]), "checkpoint_outcome").has_value());
  }
}

TEST_CASE(
    "rendezvous: the exchange: what a node outside the round said under its number (another "
    "membership's, put back after a store restart) neither counts nor interrupts it",
    "[rendezvous][exchange]") {
  using ddprun::agent::checkpoint_sources::Outcome;
  using ddprun::agent::checkpoint_sources::same_outcome;
  Job job(2, 2);
  auto nodes = elastic_nodes(job);
  for (auto& n : nodes) n->want_members();  // (as the agent of a job of several nodes does)
  auto r = form(job, nodes);
  const Scope scope = Scope::of(r[0]);
  // A node of the other membership said "none" and raised a flag in round r's scope.
  auto stale = job.client();
  const std::string value =
      TcpJobStore::job_key("job", ExchangeBook::value_key(scope, "checkpoint_outcome", "stale"));
  job.run(completed(stale->set(value, "none")));
  const std::string flag = TcpJobStore::job_key("job", ExchangeBook::flag_key(scope, "hang"));
  const std::string raised = ExchangeBook::flag_text(Flag{"stale", "a hang over there", "", false});
  job.run(completed(stale->set(flag, raised)));
  auto why = job.start(nodes[1]->interruption(r[1]));
  auto first = job.start(same_outcome(nodes[0], r[0], std::nullopt, 30s));
  auto second = job.start(same_outcome(nodes[1], r[1], std::nullopt, 30s));
  REQUIRE(job.run_until([&] { return first->done && second->done; }));
  CHECK(first->get() == Outcome::kSame);
  CHECK(second->get() == Outcome::kSame);
  CHECK(job.run(nodes[1]->gather(scope, "checkpoint_outcome", 2, 0ms)) ==
        std::vector<std::string>{"none", "none"});
  CHECK_FALSE(nodes[1]->raised(scope, "hang").has_value());
  CHECK_FALSE(why->done);
  // A member's raise takes the flag's place, and interrupts the round on the other member.
  job.run(completed(nodes[0]->raise(scope, "hang", "a rank of this round is hung", "")));
  REQUIRE(job.run_until([&] { return why->done; }));
  CHECK(why->get() == "a rank of this round is hung");
  CHECK(nodes[0]->raised(scope, "hang")->mine);
  stale->close();
}

TEST_CASE(
    "rendezvous: the exchange: a round that ends before every node said which checkpoint step it "
    "restores (a node left) starts no worker, raises nothing and spends no restart",
    "[rendezvous][exchange]") {
  using ddprun::agent::checkpoint_sources::Outcome;
  using ddprun::agent::checkpoint_sources::same_outcome;
  Job job(2, 3);
  job.config().max_restarts = 3;
  std::vector<std::shared_ptr<Rendezvous>> nodes = {job.add(), job.add(), job.add()};
  auto r0 = form(job, nodes);
  auto first = job.start(same_outcome(nodes[0], r0[0], 12, 30s));
  auto second = job.start(same_outcome(nodes[1], r0[1], 12, 30s));
  job.run(completed(nodes[2]->leave(false)));  // node 2 is gone before it said
  REQUIRE(job.run_until([&] { return first->done && second->done; }));
  CHECK(first->get() == Outcome::kRoundEnded);
  CHECK(second->get() == Outcome::kRoundEnded);
  CHECK_FALSE(nodes[0]->raised(Scope::of(r0[0]), "checkpoint_outcome").has_value());
  job.run(completed(nodes[0]->end_round(r0[0], false)));
  job.run(completed(nodes[1]->end_round(r0[1], false)));
  auto r1 = form(job, {nodes[0], nodes[1]});
  CHECK(r1[0].num_nodes == 2);
  CHECK(r1[0].restart_count == 0);
  CHECK(r1[1].restart_count == 0);
}

TEST_CASE(
    "rendezvous: the exchange: every node reads the widest stride and every step a node asks to "
    "keep, and a node's new word replaces its old",
    "[rendezvous][exchange]") {
  using ddprun::agent::CopyBoard;
  namespace copy_board = ddprun::agent::copy_board;
  Job job(3, 3);
  std::vector<std::shared_ptr<Rendezvous>> nodes = {job.add(), job.add(), job.add()};
  auto r = form(job, nodes);
  std::vector<std::shared_ptr<CopyBoard>> boards;
  for (size_t i = 0; i < nodes.size(); ++i) boards.push_back(copy_board::board(nodes[i], r[i]));
  const auto read_on = [&](size_t i, auto done) {
    CopyBoard::Read got;
    REQUIRE(job.run_until([&] {
      got = job.run(boards[i]->read());
      return done(got);
    }));
    return got;
  };
  // Nothing said: stride 1, nothing to keep.
  const CopyBoard::Read none = job.run(boards[2]->read());
  CHECK(none.widest == 1);
  CHECK(none.keep.empty());
  CHECK(job.run(boards[0]->say({4, std::nullopt})));
  CHECK(job.run(boards[1]->say({2, 17})));
  const CopyBoard::Read both =
      read_on(2, [](const CopyBoard::Read& x) { return x.widest == 4 && !x.keep.empty(); });
  CHECK(both.keep == std::vector<int64_t>{17});
  // Node 1 caught up; node 0 now asks for step -3 (a step may be negative).
  CHECK(job.run(boards[1]->say({1, std::nullopt})));
  CHECK(job.run(boards[0]->say({1, -3})));
  const CopyBoard::Read after = read_on(2, [](const CopyBoard::Read& x) {
    return x.widest == 1 && x.keep == std::vector<int64_t>{-3};
  });
  CHECK(after.keep == std::vector<int64_t>{-3});
  // What a node publishes, and what is not: read as nothing.
  CHECK(copy_board::to_text({8, 5}) == "8 5");
  CHECK(copy_board::to_text({1, std::nullopt}) == "1 -");
  CHECK(copy_board::from_text("8 5") == CopyBoard::Said{8, 5});
  CHECK(copy_board::from_text("1 -") == CopyBoard::Said{1, std::nullopt});
  for (const char* bad : {"", "8", "0 -", "x 5", "8 5x", "8  5", "2097152 -", "4"}) {
    CAPTURE(bad);
    CHECK_FALSE(copy_board::from_text(bad));
  }
}
