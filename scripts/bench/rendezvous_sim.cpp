// In-process simulation of many agents: N real ElasticRendezvous handlers (the rendezvous code
// itself) on one io_context, with no worker processes: each "agent" runs the agent's round loop
// (next_round, worker_store, interruption, end_round). Two transports:
//   tcp     each agent has its own TcpJobStore with real sockets, against a real store (a
//           StoreThread in this process): 6 descriptors per agent;
//   memory  each agent has a MemoryJobStore over one shared KeyValueStore (the store's keys,
//           owned keys and watches) on the same loop, without sockets: for N beyond the
//           descriptor limit.
// Measured per N:
//   form:     every agent joins; ms until all N hold round 0 (a fixed-size N:N-free 1:N job that
//             forms at N);
//   loss:     one agent's connections close (it died); ms until the N-1 others hold the next round;
//   scale-up: a new agent joins; ms until all N hold the round after;
// and, per agent and phase, the store's requests served and bytes sent, and CPU seconds: the store
// thread's (tcp), or the whole process's (memory: store and agents share one thread).
//
//   rendezvous_sim --agents 1000 [--agents 2000 ...] [--timeout-s 300] [--transport memory]
// Prints one line per N: N form_ms loss_ms scaleup_ms then per phase requests/agent, KiB sent/agent
// and CPU seconds. Exits 1 when a phase does not complete within the timeout.
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "ddprun/job_store/tcp_job_store.hpp"
#include "ddprun/rendezvous/elastic_rendezvous.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/rendezvous/rendezvous_config.hpp"
#include "ddprun/store/auth.hpp"
#include "ddprun/store/store_server.hpp"
#include "ddprun/store/store_thread.hpp"
#include "memory_job_store.hpp"

namespace asio = boost::asio;
using namespace ddprun::rendezvous;
using namespace ddprun::store;
using Clock = std::chrono::steady_clock;

namespace {

struct Agent {
  std::shared_ptr<Rendezvous> rdzv;
  std::optional<Round> round;  // the latest round it holds
  bool dead = false;
};

struct Sim {
  // `token`: the store has a secret and every agent authenticates with the job's token. `tls`
  // enabled: the store serves TLS with its certificate and the agents check it against its CA.
  Sim(bool memory, bool token, TlsFiles tls) : tls(std::move(tls)) {
    if (memory) {
      kv = std::make_shared<KeyValueStore>();
      traffic = std::make_shared<ddprun::bench::MemoryTraffic>();
    } else {
      ServerOptions o;
      if (token) {
        secret = Token(std::string(32, 's'));
        o.secret = secret;
      }
      // (No client certificates asked: the token says who the agents are.)
      o.tls = server_tls_context({this->tls.enabled, "", this->tls.cert_file, this->tls.key_file});
      store = std::make_unique<StoreThread>(o);
    }
  }
  std::optional<Token> secret;
  TlsFiles tls;
  asio::io_context io{1};
  std::unique_ptr<StoreThread> store;                     // tcp
  std::shared_ptr<KeyValueStore> kv;                      // memory
  std::shared_ptr<ddprun::bench::MemoryTraffic> traffic;  // memory
  std::vector<std::unique_ptr<Agent>> agents;
  int n = 0;
  std::string run_id;
};

asio::awaitable<void> agent_loop(Agent* a) {
  try {
    co_await a->rdzv->join();
    for (;;) {
      std::optional<Round> round = co_await a->rdzv->next_round();
      if (!round) co_return;
      a->round = round;
      co_await a->rdzv->worker_store(*round);
      const std::string why = co_await a->rdzv->interruption(*round);
      if (why.empty()) co_return;
      co_await a->rdzv->end_round(*round, false);
    }
  } catch (const std::exception&) {
    // Its store connections were closed (a simulated death) or the job ended.
  }
}

void add_agent(Sim& sim, int max_nodes) {
  RendezvousConfig c;
  c.backend = Backend::kC10d;
  c.min_nodes = 1;
  c.max_nodes = max_nodes;
  c.run_id = sim.run_id;
  c.nproc = 1;
  c.host = "sim";
  c.endpoint_host = "127.0.0.1";
  c.endpoint_port = sim.store ? sim.store->port() : 0;
  c.host_store = RendezvousConfig::HostStore::kNo;
  if (sim.secret) c.auth_token = scope_token(*sim.secret, TcpJobStore::server_key(sim.run_id, ""));
  c.tls = TlsFiles{sim.tls.enabled, sim.tls.ca_file, "", ""};
  c.join_timeout = std::chrono::seconds(600);
  c.heartbeat_timeout = std::chrono::seconds(600);  // a loaded loop must not expel anyone
  c.last_call_timeout = std::chrono::seconds(600);  // the first round forms at max_nodes
  auto a = std::make_unique<Agent>();
  if (sim.kv) {
    const std::string id = fmt::format("sim_{}", sim.agents.size());
    auto store = std::make_shared<ddprun::bench::MemoryJobStore>(
        sim.io.get_executor(), sim.kv, "ddprun/" + sim.run_id + "/", sim.traffic);
    a->rdzv = ElasticRendezvous::create(sim.io, c, id, store, nullptr);
  } else {
    a->rdzv = make_rendezvous(sim.io, c);
  }
  asio::co_spawn(sim.io, agent_loop(a.get()), asio::detached);
  sim.agents.push_back(std::move(a));
}

struct Sample {
  uint64_t requests = 0, bytes = 0;
  double cpu = 0;
};

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto secs = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

Sample sample(Sim& sim) {
  Sample s;
  if (sim.kv) {
    s.requests = sim.traffic->requests;
    s.bytes = sim.traffic->bytes_sent;
    s.cpu = process_cpu_seconds();
    return s;
  }
  sim.store->call([&](StoreServer& server) {
    for (uint64_t r : server.counters().requests) s.requests += r;
    s.bytes = server.counters().bytes_sent;
  });
  s.cpu = sim.store->cpu_seconds();
  return s;
}

// Runs the loop until every live agent holds a round with `nodes` members, newer than `after`.
bool run_until(Sim& sim, int nodes, int after, Clock::time_point deadline) {
  const auto done = [&] {
    for (const auto& a : sim.agents) {
      if (a->dead) continue;
      if (!a->round || a->round->number <= after || a->round->num_nodes != nodes) return false;
    }
    return true;
  };
  while (!done()) {
    if (Clock::now() > deadline) return false;
    sim.io.run_one_for(std::chrono::milliseconds(100));
  }
  return true;
}

std::string per_agent(const Sample& a, const Sample& b, int agents) {
  return fmt::format("{:.1f} {:.1f} {:.2f}", double(b.requests - a.requests) / agents,
                     double(b.bytes - a.bytes) / 1024 / agents, b.cpu - a.cpu);
}

int simulate(int n, std::chrono::seconds timeout, bool memory, bool token, const TlsFiles& tls) {
  Sim sim(memory, token, tls);
  sim.n = n;
  sim.run_id = fmt::format("sim{}", n);
  const auto deadline = [&] { return Clock::now() + timeout; };
  const auto ms = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };

  Sample s0 = sample(sim);
  auto t = Clock::now();
  for (int i = 0; i < n; ++i) add_agent(sim, n);
  if (!run_until(sim, n, -1, deadline())) return 1;
  const double form = ms(t);
  Sample s1 = sample(sim);
  const int r0 = sim.agents.front()->round->number;

  // A node dies: the one with the highest node rank (not the worker store's host).
  Agent* victim = nullptr;
  for (auto& a : sim.agents) {
    if (a->round->node_rank == n - 1) victim = a.get();
  }
  t = Clock::now();
  victim->dead = true;
  victim->rdzv->abandon();
  if (!run_until(sim, n - 1, r0, deadline())) return 1;
  const double loss = ms(t);
  Sample s2 = sample(sim);
  const int r1 = sim.agents.front()->round->number;

  t = Clock::now();
  add_agent(sim, n);
  if (!run_until(sim, n, r1, deadline())) return 1;
  const double up = ms(t);
  Sample s3 = sample(sim);

  std::cout << fmt::format("{} {:.0f} {:.0f} {:.0f} form {} loss {} scaleup {}", n, form, loss, up,
                           per_agent(s0, s1, n), per_agent(s1, s2, n - 1), per_agent(s2, s3, n))
            << std::endl;
  for (auto& a : sim.agents) a->rdzv->abandon();
  sim.io.run_for(std::chrono::seconds(2));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rendezvous_sim: N in-process agents against a real store"};
  std::vector<int> ns;
  int timeout_s = 300;
  app.add_option("--agents", ns, "agent counts to simulate, each in a fresh job")->required();
  app.add_option("--timeout-s", timeout_s, "per phase");
  std::string transport = "tcp";
  app.add_option("--transport", transport, "tcp (sockets to a store thread) or memory (no sockets)")
      ->check(CLI::IsMember({"tcp", "memory"}));
  bool token = false;
  app.add_flag("--token", token, "tcp: the store has a secret; agents authenticate with a token");
  TlsFiles tls;
  app.add_option("--tls-cert", tls.cert_file, "tcp: the store serves TLS with this certificate");
  app.add_option("--tls-key", tls.key_file, "its key");
  app.add_option("--tls-ca", tls.ca_file, "the CA the agents check the store's certificate with");
  CLI11_PARSE(app, argc, argv);
  tls.enabled = !tls.cert_file.empty();
  spdlog::set_level(spdlog::level::err);  // teardown closes thousands of sockets mid-write
  for (int n : ns) {
    if (simulate(n, std::chrono::seconds(timeout_s), transport == "memory", token, tls) != 0) {
      std::cout << n << " did not complete within " << timeout_s << " s" << std::endl;
      return 1;
    }
  }
  return 0;
}
