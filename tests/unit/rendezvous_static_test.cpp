// The static handler in-process (rendezvous_job.hpp): ranks by node rank, restarts, signals and
// node 0's settings.
#include <csignal>

#include "rendezvous_job.hpp"

using namespace rendezvous_test;

TEST_CASE("rendezvous: static ranks follow node ranks and a failure anywhere restarts the job",
          "[rendezvous]") {
  Job job(2, 2);
  RendezvousConfig c = job.config();
  c.backend = Backend::kStatic;
  c.max_restarts = 1;
  c.master_addr = "127.0.0.1";
  c.store_port = job.port();
  std::vector<std::shared_ptr<Rendezvous>> nodes;
  for (int rank : {1, 0}) {
    c.node_rank = rank;
    c.nproc = 2 + rank;
    TcpJobStoreSpec spec{c.run_id, "127.0.0.1", job.port(), c.join_timeout, c.heartbeat_timeout};
    auto store = std::make_shared<TcpJobStore>(job.io().get_executor(), spec);
    nodes.push_back(StaticRendezvous::create(job.io(), c, store, nullptr));
    job.adopt(nodes.back());
  }
  auto r0 = form(job, nodes);
  CHECK(r0[0].node_rank == 1);
  CHECK(r0[0].base_rank == 2);
  CHECK(r0[1].base_rank == 0);
  CHECK(r0[0].world_size == 5);
  CHECK(job.run(nodes[0]->worker_store(r0[0]))->port == job.port());

  auto why = job.start(nodes[1]->interruption(r0[1]));
  job.run(completed(failure_reports::report(nodes[0], r0[0], "node 1 failed")));
  REQUIRE(job.run_until([&] { return why->done; }));
  CHECK_THAT(why->get(), Catch::Contains("another node's workers failed"));
  job.run(completed(nodes[1]->end_round(r0[1], false)));  // the attempt moved on: no extra cost
  auto r1 = form(job, nodes);
  CHECK(r1[0].restart_count == 1);
  CHECK(r1[1].restart_count == 1);

  // A peer's agent dies at the exit barrier: the barrier fails at once.
  auto done = job.start(nodes[1]->exit_barrier(r1[1]));
  nodes[0]->abandon();
  REQUIRE(job.run_until([&] { return done->done; }));
  CHECK_FALSE(done->get());
}

TEST_CASE("rendezvous: a static node stopped by a signal stops the others with the same signal",
          "[rendezvous]") {
  Job job(3, 3);
  RendezvousConfig c = job.config();
  c.backend = Backend::kStatic;
  c.master_addr = "127.0.0.1";
  c.store_port = job.port();
  std::vector<std::shared_ptr<Rendezvous>> nodes;
  for (int rank : {0, 1, 2}) {
    c.node_rank = rank;
    TcpJobStoreSpec spec{c.run_id, "127.0.0.1", job.port(), c.join_timeout, c.heartbeat_timeout};
    auto store = std::make_shared<TcpJobStore>(job.io().get_executor(), spec);
    nodes.push_back(StaticRendezvous::create(job.io(), c, store, nullptr));
    job.adopt(nodes.back());
  }
  auto r0 = form(job, nodes);
  auto why0 = job.start(nodes[0]->interruption(r0[0]));
  CHECK(nodes[0]->membership_fixed());
  job.run(completed(stop_exchange::announce(nodes[1], 1, SIGINT)));
  job.run(completed(stop_exchange::announce(nodes[2], 2, SIGTERM)));  // too late: node 1's stands
  REQUIRE(job.run_until([&] { return why0->done; }));
  CHECK(why0->get() == "node 1 was stopped by signal 2");
  for (int i : {0, 1, 2}) {
    REQUIRE(job.run_until([&] { return nodes[i]->raised(Scope::job(), "stop").has_value(); }));
    const Flag f = *nodes[i]->raised(Scope::job(), "stop");
    CHECK(f.node == "1");
    CHECK(f.detail == "2");
    CHECK(f.mine == (i == 1));  // the first raise is the job's, whoever raised it
  }
  // A node that would start another round ends with the job instead of waiting for the others.
  auto next = job.start(nodes[0]->next_round());
  REQUIRE(job.run_until([&] { return next->done; }));
  CHECK_FALSE(next->get().has_value());
}

TEST_CASE("rendezvous: static node 0's settings are the job's even when a peer asks first",
          "[rendezvous]") {
  asio::io_context io;
  ServerOptions o;
  o.host = "127.0.0.1";
  auto server = std::make_unique<StoreThread>(o);
  RendezvousConfig c;
  c.backend = Backend::kStatic;
  c.run_id = "job";
  c.min_nodes = c.max_nodes = 2;
  c.master_addr = "127.0.0.1";
  c.store_port = server->port();
  const auto store = [&] {
    TcpJobStoreSpec spec{c.run_id, "127.0.0.1", c.store_port, c.join_timeout, c.heartbeat_timeout};
    return std::make_shared<TcpJobStore>(io.get_executor(), spec);
  };
  c.node_rank = 0;
  c.max_restarts = 1;
  auto node0 = StaticRendezvous::create(io, c, store(), std::move(server));
  c.node_rank = 1;
  c.max_restarts = 3;
  auto node1 = StaticRendezvous::create(io, c, store(), nullptr);
  // Node 1 reaches node 0's store before node 0 itself has joined: it is still refused.
  CHECK_THROWS_WITH(run_on(io, completed(node1->join())),
                    Catch::Contains("this node's --max_restarts=3 differs from the job's "
                                    "--max_restarts=1"));
  CHECK(run_on(io, completed(node0->join())));
  node0->abandon();
  node1->abandon();
  io.run_for(1s);
}
