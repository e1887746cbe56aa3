// The one-node handler in-process: restarts within the budget, a fresh store each time.
#include "rendezvous_job.hpp"

using namespace rendezvous_test;

TEST_CASE("rendezvous: one node restarts within its budget and empties its store each time",
          "[rendezvous]") {
  asio::io_context io;
  RendezvousConfig c;
  c.store_host = "127.0.0.1";
  c.max_restarts = 1;
  c.nproc = 3;
  auto node = make_rendezvous(io, c);
  run_on(io, completed(node->join()));
  const Round r0 = *run_on(io, node->next_round());
  CHECK(r0.world_size == 3);
  const WorkerStoreAddress s = *run_on(io, node->worker_store(r0));
  auto client = run_on(
      io, AsyncStoreClient::connect(io.get_executor(), "127.0.0.1", static_cast<uint16_t>(s.port)));
  run_on(io, completed(client->set("written by attempt 0", "x")));
  run_on(io, completed(failure_reports::report(node, r0, "first")));
  const Round r1 = *run_on(io, node->next_round());
  CHECK(r1.restart_count == 1);
  run_on(io, node->worker_store(r1));
  CHECK(run_on(io, client->num_keys()) == 0);
  run_on(io, completed(failure_reports::report(node, r1, "second")));
  CHECK_FALSE(run_on(io, node->next_round()).has_value());
  CHECK(node->ending().kind == JobEnd::Kind::kRestartsExhausted);
  CHECK(run_on(io, failure_reports::reported(node, 1)) == std::vector<std::string>{"second"});
  run_on(io, completed(node->raise(Scope::of(r1), "hang", "hung", "")));
  REQUIRE(node->raised(Scope::of(r1), "hang").has_value());
  CHECK(node->raised(Scope::of(r1), "hang")->mine);
  CHECK_FALSE(node->raised(Scope::of(r0), "hang").has_value());
  client->close();
  node->abandon();
}
