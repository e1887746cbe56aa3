#include <sched.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <catch2/catch.hpp>

#include "agent_config.hpp"
#include "launch_config.hpp"
#include "test_certificates.hpp"

using namespace ddprun::launcher;
using ddprun::agent::Environment;

namespace {
LaunchConfig parse(std::vector<std::string> args, Environment env = {}) {
  return parse_command_line(args, env);
}
}  // namespace

TEST_CASE("cli: dash and underscore spellings are the same flag", "[cli]") {
  const auto a = parse(
      {"--nproc_per_node=3", "--max_restarts", "2", "--rdzv_id=j", "--master_port=9", "train.py"});
  const auto b = parse({"--nproc-per-node", "3", "--max-restarts=2", "--rdzv-id", "j",
                        "--master-port", "9", "train.py"});
  CHECK(a.rdzv.nproc == 3);
  CHECK(b.rdzv.nproc == 3);
  CHECK(a.rdzv.max_restarts == 2);
  CHECK(b.rdzv.max_restarts == 2);
  CHECK(a.rdzv.run_id == b.rdzv.run_id);
}

TEST_CASE("cli: PET_ variables are fallbacks and the command line wins", "[cli]") {
  const Environment env = {{"PET_NPROC_PER_NODE", "4"},
                           {"PET_MAX_RESTARTS", "3"},
                           {"PET_STANDALONE", "1"},
                           {"PET_ROLE", "trainer"}};
  const auto from_env = parse({"train.py"}, env);
  CHECK(from_env.rdzv.nproc == 4);
  CHECK(from_env.rdzv.max_restarts == 3);
  CHECK(from_env.standalone);
  CHECK(from_env.role == "trainer");
  const auto overridden = parse({"--nproc_per_node=2", "--role=x", "train.py"}, env);
  CHECK(overridden.rdzv.nproc == 2);
  CHECK(overridden.role == "x");
}

TEST_CASE("cli: a c10d endpoint naming this machine is hosted by one of its agents", "[cli]") {
  using HostStore = ddprun::rendezvous::RendezvousConfig::HostStore;
  const auto endpoint = [](const std::string& host) {
    return parse(
               {"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=" + host + ":29400", "t.py"})
        .rdzv.host_store;
  };
  CHECK(endpoint("127.0.0.1") == HostStore::kIfFree);
  CHECK(endpoint("192.0.2.77") == HostStore::kNo);
}

TEST_CASE("cli: booleans read one way in PET_ flags and rdzv_conf is_host", "[cli]") {
  // torchrun reads PET_ flags with int() (so "true" crashes it) and is_host with its own list.
  for (const char* yes : {"1", "2", "true", "True", "t", "yes", "Y"}) {
    INFO(yes);
    CHECK(parse({"train.py"}, {{"PET_STANDALONE", yes}}).standalone);
    CHECK(make_agent_config(parse({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1",
                                   std::string("--rdzv_conf=is_host=") + yes, "t.py"}),
                            {}, nullptr)
              .rdzv.host_store == ddprun::rendezvous::RendezvousConfig::HostStore::kYes);
  }
  for (const char* no : {"0", "false", "F", "no", "n"}) {
    INFO(no);
    CHECK_FALSE(parse({"train.py"}, {{"PET_NO_PYTHON", no}}).no_python);
    CHECK(make_agent_config(parse({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1",
                                   std::string("--rdzv_conf=is_host=") + no, "t.py"}),
                            {}, nullptr)
              .rdzv.host_store == ddprun::rendezvous::RendezvousConfig::HostStore::kNo);
  }
  CHECK_THROWS_WITH(parse({"train.py"}, {{"PET_STANDALONE", "maybe"}}),
                    Catch::Contains("PET_STANDALONE: invalid boolean value 'maybe'"));
  CHECK_THROWS_WITH(parse({"--rdzv_conf=is_host=", "t.py"}),
                    Catch::Contains("is_host: invalid boolean value ''"));
}

TEST_CASE("cli: every rdzv_conf value is checked for its kind up front", "[cli]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"keep_alive_max_attempt=x", "keep_alive_max_attempt: invalid int value 'x'"},
      {"keep_alive_max_attempt=0", "must be at least 1"},
      {"keep_alive_interval=soon", "keep_alive_interval: invalid float value 'soon'"},
      {"read_timeout=-2", "read_timeout: invalid seconds value '-2'"},
      {"last_call_timeout=nan", "invalid float value 'nan'"},
      {"is_host=perhaps", "is_host: invalid boolean value 'perhaps'"},
  };
  for (const auto& [conf, message] : bad) {
    INFO(conf);
    CHECK_THROWS_WITH(parse({"--rdzv_conf=" + conf, "t.py"}), Catch::Contains(message));
  }
  const auto a = make_agent_config(
      parse({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1",
             "--rdzv_conf=keep_alive_interval=0.25,keep_alive_max_attempt=4", "t.py"}),
      {}, nullptr);
  CHECK(a.rdzv.heartbeat_timeout == std::chrono::milliseconds(1000));
  // Either half of the older pair alone takes torchrun's default for the other (5 s, 3 attempts).
  CHECK(parse({"--rdzv_conf=keep_alive_max_attempt=2", "t.py"}).rdzv.heartbeat_timeout ==
        std::chrono::seconds(10));
  CHECK(parse({"--rdzv_conf=keep_alive_interval=1", "t.py"}).rdzv.heartbeat_timeout ==
        std::chrono::seconds(3));
}

TEST_CASE("cli: --help lists every option of the table, both spellings", "[cli]") {
  const std::string help = cli_help();
  for (const char* name :
       {"--nnodes N|MIN:MAX", "--nproc-per-node, --nproc_per_node", "--rdzv-conf, --rdzv_conf",
        "-m, --module", "--no-python, --no_python", "--logs-specs, --logs_specs",
        "--virtual-local-rank, --virtual_local_rank", "--shutdown-timeout, --shutdown_timeout"}) {
    CHECK_THAT(help, Catch::Contains(name));
  }
  CHECK_THAT(help, !Catch::Contains("one node in this version"));
  for (size_t start = 0, end; (end = help.find('\n', start)) != std::string::npos;
       start = end + 1) {
    INFO(help.substr(start, end - start));
    CHECK(end - start <= 100);
  }
}

TEST_CASE("cli: the script's own arguments pass untouched", "[cli]") {
  const auto c =
      parse({"--nproc_per_node=2", "train.py", "--lr", "0.1", "-m", "--nproc_per_node=9"});
  CHECK(c.training_script == "train.py");
  CHECK(c.training_script_args ==
        std::vector<std::string>{"--lr", "0.1", "-m", "--nproc_per_node=9"});
  CHECK(c.rdzv.nproc == 2);
}

TEST_CASE("cli: defaults match torchrun's", "[cli]") {
  const auto c = parse({"--nnodes=2", "train.py"});
  CHECK(c.rdzv.nproc == 1);
  CHECK(c.rdzv.backend == ddprun::rendezvous::Backend::kStatic);
  CHECK(c.rdzv.run_id == "none");
  CHECK(c.rdzv.master_addr == "127.0.0.1");
  CHECK(c.rdzv.store_port == 29500);
  CHECK(c.role == "default");
  CHECK(c.signals == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(c.shutdown_timeout == std::chrono::seconds(30));
}

TEST_CASE("cli: standalone is a single-node c10d job on a free port with a fresh run id", "[cli]") {
  const auto a = parse({"--standalone", "train.py"});
  const auto b = parse({"--standalone", "train.py"});
  CHECK(a.rdzv.backend == ddprun::rendezvous::Backend::kC10d);
  CHECK(a.rdzv.endpoint_port == 0);
  CHECK(a.rdzv.run_id != b.rdzv.run_id);
  const auto agent = make_agent_config(a, {}, nullptr);
  CHECK(agent.rdzv.store_port == 0);
  CHECK(agent.rdzv.max_nodes == 1);
}

TEST_CASE("cli: one node without a store port is a c10d job on a free port, as in torch 2.14",
          "[cli]") {
  const auto a = parse({"--rdzv_id=mine", "train.py"});
  const auto b = parse({"train.py"});
  CHECK(a.rdzv.backend == ddprun::rendezvous::Backend::kC10d);
  CHECK(a.rdzv.endpoint_port == 0);
  CHECK(a.rdzv.run_id != "mine");  // torch replaces it with a fresh one too
  CHECK(a.rdzv.run_id != b.rdzv.run_id);
  CHECK(make_agent_config(a, {}, nullptr).rdzv.store_port == 0);
  // A port, an endpoint or more than one node keep the static backend.
  CHECK(parse({"--master_port=29500", "train.py"}).rdzv.backend ==
        ddprun::rendezvous::Backend::kStatic);
  CHECK(parse({"--rdzv_endpoint=h:1", "train.py"}).rdzv.backend ==
        ddprun::rendezvous::Backend::kStatic);
  CHECK(parse({"--nnodes=2", "train.py"}).rdzv.backend == ddprun::rendezvous::Backend::kStatic);
}

TEST_CASE("cli: malformed input is a usage error naming the problem", "[cli]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--nproc_per_node=0", "t.py"}, "'0' is not a positive count"},
      {{"--nproc_per_node=two", "t.py"}, "'two' is not a positive count, auto, cpu or gpu"},
      {{"--nnodes=3:2", "t.py"}, "MIN:MAX"},
      {{"--max_restarts=-1", "t.py"}, "must not be negative"},
      {{"--master_port=70000", "t.py"}, "not a TCP port"},
      {{"--redirects=4", "t.py"}, "0-3"},
      {{"--tee=0:1,0x", "t.py"}, "expected rank:value"},
      {{"--signals_to_handle=SIGKILL", "t.py"}, "SIGKILL"},
      {{"--rdzv_conf=joint_timeout=5", "t.py"}, "unknown key 'joint_timeout'"},
      {{"--start_method=thread", "t.py"}, "invalid choice"},
      {{"--numa-binding=numa", "t.py"}, "invalid choice: 'numa'"},
      {{"--event-log-handler=syslog", "t.py"}, "invalid choice: 'syslog'"},
      {{"--print-completion=fish", "t.py"}, "choose from bash, zsh, tcsh"},
      {{"--nproc_per_node=xpu", "t.py"}, "NVIDIA GPUs only"},
      {{"--no_python", "-m", "t.py"}, "at the same time"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=localhost:port", "t.py"}, "bad port"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=host:70000", "t.py"}, "bad port"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=:29400", "t.py"}, "no host"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=[::1:29400", "t.py"}, "unterminated"},
      {{"--bogus", "t.py"}, "unrecognized arguments: --bogus"},
      {{"--nproc_per_node=2"}, "training_script"},
  };
  for (const auto& [args, message] : bad) {
    INFO(args.front());
    try {
      parse(args);
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK_THAT(e.what(), Catch::Contains(message));
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("cli: what this version does not run yet is refused with the reason", "[cli]") {
  CHECK_THROWS_WITH(parse({"--nnodes=2", "--rdzv_backend=c10d", "t.py"}),
                    Catch::Contains("needs --rdzv_endpoint"));
  CHECK_THROWS_WITH(parse({"--nnodes=1:4", "t.py"}), Catch::Contains("elastic MIN:MAX"));
  CHECK_THROWS_WITH(parse({"--rdzv_backend=etcd", "t.py"}),
                    Catch::Contains("needs --rdzv_endpoint"));
  CHECK_THROWS_WITH(parse({"--rdzv_backend=zookeeper", "t.py"}),
                    Catch::Contains("unknown backend"));
}

TEST_CASE("cli: a c10d endpoint is host[:port] with torchrun's default port", "[cli]") {
  CHECK(parse({"--rdzv_backend=c10d", "--rdzv_endpoint=node1", "t.py"}).rdzv.endpoint_port ==
        29400);
  CHECK(parse({"--rdzv_backend=c10d", "--rdzv_endpoint=node1:1234", "t.py"}).rdzv.endpoint_port ==
        1234);
  CHECK(parse({"--rdzv_backend=c10d", "--rdzv_endpoint=[::1]:99", "t.py"}).rdzv.endpoint_port ==
        99);
  CHECK(parse({"--rdzv_backend=c10d", "--rdzv_endpoint=::1", "t.py"}).rdzv.endpoint_port == 29400);
}

TEST_CASE("cli: torchrun's keep-alive pair sets the heartbeat timeout unless it is given",
          "[cli]") {
  const auto a = make_agent_config(
      parse({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1",
             "--rdzv_conf=keep_alive_interval=2,keep_alive_max_attempt=4", "t.py"}),
      {}, nullptr);
  CHECK(a.rdzv.backend == ddprun::rendezvous::Backend::kC10d);
  CHECK(a.rdzv.max_nodes == 2);
  CHECK(a.rdzv.heartbeat_timeout == std::chrono::seconds(8));
  const auto b =
      make_agent_config(parse({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1",
                               "--rdzv_conf=keep_alive_interval=2,heartbeat_timeout=1", "t.py"}),
                        {}, nullptr);
  CHECK(b.rdzv.heartbeat_timeout == std::chrono::seconds(1));
  CHECK(b.rdzv.host_store == ddprun::rendezvous::RendezvousConfig::HostStore::kNo);
}

TEST_CASE("cli: a static multi-node job needs a node rank in range and a findable port", "[cli]") {
  const auto c = parse({"--nnodes=3", "--node_rank=2", "--master_addr=10.0.0.1",
                        "--rdzv_conf=join_timeout=7,heartbeat_timeout=0.5", "t.py"});
  const auto a = make_agent_config(c, {}, nullptr);
  CHECK(a.rdzv.backend == ddprun::rendezvous::Backend::kStatic);
  CHECK(a.rdzv.max_nodes == 3);
  CHECK(a.rdzv.node_rank == 2);
  CHECK(a.rdzv.store_port == 29500);
  CHECK(a.rdzv.master_addr == "10.0.0.1");
  CHECK(a.rdzv.endpoint_host == "10.0.0.1");
  CHECK(a.rdzv.join_timeout == std::chrono::seconds(7));
  CHECK(a.rdzv.heartbeat_timeout == std::chrono::milliseconds(500));
  CHECK_THROWS_WITH(parse({"--nnodes=2", "--node_rank=2", "t.py"}),
                    Catch::Contains("not in [0, 2)"));
  CHECK_THROWS_WITH(parse({"--nnodes=2", "--master_port=0", "t.py"}),
                    Catch::Contains("cannot be found"));
  CHECK_THROWS_WITH(parse({"--rdzv_conf=join_timeout=-1", "t.py"}),
                    Catch::Contains("join_timeout: invalid seconds value '-1'"));
  CHECK_THROWS_WITH(parse({"--rdzv_conf=join_timeout=0", "t.py"}),
                    Catch::Contains("positive seconds"));
}

TEST_CASE("cli: static and etcd jobs wait torchrun's rendezvous timeout, 900 s unless given",
          "[cli]") {
  const auto wait = [](std::vector<std::string> args) {
    return make_agent_config(parse(std::move(args)), {}, nullptr).rdzv.join_timeout;
  };
  using std::chrono::seconds;
  CHECK(wait({"--nnodes=2", "--node_rank=0", "t.py"}) == seconds(900));
  CHECK(wait({"--nnodes=2", "--node_rank=0", "--rdzv_conf=timeout=3600", "t.py"}) == seconds(3600));
  CHECK(wait({"--nnodes=2", "--rdzv_backend=etcd-v2", "--rdzv_endpoint=h:2379", "t.py"}) ==
        seconds(900));
  // c10d's is join_timeout (600 s), whatever `timeout` says, as in torchrun's dynamic rendezvous.
  CHECK(wait({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1", "--rdzv_conf=timeout=5",
              "t.py"}) == seconds(600));
}

TEST_CASE("cli: blanks around rdzv_conf keys and values and list pieces are torchrun's strip()",
          "[cli]") {
  const auto c = parse({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1",
                        "--rdzv_conf= join_timeout = 7 , is_host=0 ", "--nproc_per_node=4",
                        "--local_ranks_filter=0, 2", "--redirects= 0:1, 3 :2", "t.py"});
  const auto a = make_agent_config(c, {}, nullptr);
  CHECK(a.rdzv.join_timeout == std::chrono::seconds(7));
  CHECK(a.rdzv.host_store == ddprun::rendezvous::RendezvousConfig::HostStore::kNo);
  CHECK(c.console_ranks == std::set<int>{0, 2});
  CHECK(a.redirects[0] == ddprun::agent::Std::kOut);
  CHECK(a.redirects[3] == ddprun::agent::Std::kErr);
  CHECK_THROWS_WITH(parse({"--rdzv_conf= =7", "t.py"}), Catch::Contains("is not key=value"));
}

TEST_CASE("cli: a stream map's rank this node does not have is ignored, as torchrun's to_map does",
          "[cli]") {
  const auto a =
      make_agent_config(parse({"--nproc_per_node=4", "-t", "0:3,5:3", "t.py"}), {}, nullptr);
  REQUIRE(a.tee.size() == 4);
  CHECK(a.tee[0] == ddprun::agent::Std::kAll);
  CHECK(a.tee[3] == ddprun::agent::Std::kNone);
}

TEST_CASE("cli: --nproc_per_node=cpu counts the CPUs this process may run on", "[cli]") {
  cpu_set_t all;
  REQUIRE(::sched_getaffinity(0, sizeof all, &all) == 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0);  // as under taskset -c N
  const int under_one = parse({"--nproc_per_node=cpu", "t.py"}).rdzv.nproc;
  REQUIRE(::sched_setaffinity(0, sizeof all, &all) == 0);
  CHECK(under_one == 1);
  CHECK(parse({"--nproc_per_node=cpu", "t.py"}).rdzv.nproc == CPU_COUNT(&all));
}

TEST_CASE("cli: --virtual_local_rank refuses more workers than CUDA_VISIBLE_DEVICES lists",
          "[cli]") {
  CHECK_THROWS_WITH(
      parse({"--nproc_per_node=4", "--virtual_local_rank", "t.py"},
            {{"CUDA_VISIBLE_DEVICES", "0,1"}}),
      Catch::Contains("local rank 2 exceeds the devices of CUDA_VISIBLE_DEVICES=0,1"));
  CHECK(parse({"--nproc_per_node=2", "--virtual_local_rank", "t.py"},
              {{"CUDA_VISIBLE_DEVICES", "0,1"}})
            .virtual_local_rank);
  // Set and empty: one worker, no more (torchrun's second worker fails; none sees a hidden GPU).
  CHECK_THROWS_WITH(
      parse({"--nproc_per_node=2", "--virtual_local_rank", "t.py"}, {{"CUDA_VISIBLE_DEVICES", ""}}),
      Catch::Contains("local rank 1 exceeds the devices of CUDA_VISIBLE_DEVICES="));
  CHECK(
      parse({"--nproc_per_node=1", "--virtual_local_rank", "t.py"}, {{"CUDA_VISIBLE_DEVICES", ""}})
          .virtual_local_rank);
}

TEST_CASE("cli: per-rank stream maps take ranks of any width", "[cli]") {
  const auto c = parse({"--nproc_per_node=12", "--tee=0:3,11:1", "t.py"});
  const auto a = make_agent_config(c, {}, nullptr);
  CHECK(a.tee[0] == ddprun::agent::Std::kAll);
  CHECK(a.tee[11] == ddprun::agent::Std::kOut);
  CHECK(a.tee[5] == ddprun::agent::Std::kNone);
}

TEST_CASE("cli: python entry points run as PYTHON_EXEC -u [-m] script", "[cli]") {
  auto a =
      make_agent_config(parse({"-m", "pkg.train", "--x"}), {{"PYTHON_EXEC", "/opt/py"}}, nullptr);
  CHECK(a.entrypoint == std::vector<std::string>{"/opt/py", "-u", "-m", "pkg.train", "--x"});
  a = make_agent_config(parse({"--no_python", "/bin/echo", "hi"}), {}, nullptr);
  CHECK(a.entrypoint == std::vector<std::string>{"/bin/echo", "hi"});
  a = make_agent_config(parse({"t.py"}), {}, nullptr);
  CHECK(a.entrypoint == std::vector<std::string>{"python3", "-u", "t.py"});
}

TEST_CASE("cli: OMP_NUM_THREADS is set to 1 with torchrun's notice only when unset", "[cli]") {
  std::string notice;
  auto a = make_agent_config(parse({"--nproc_per_node=2", "t.py"}), {}, &notice);
  CHECK(a.env.at("OMP_NUM_THREADS") == "1");
  CHECK_THAT(notice, Catch::Contains("Setting OMP_NUM_THREADS"));
  notice.clear();
  a = make_agent_config(parse({"--nproc_per_node=2", "t.py"}), {{"OMP_NUM_THREADS", "4"}}, &notice);
  CHECK(a.env.at("OMP_NUM_THREADS") == "4");
  CHECK(notice.empty());
  a = make_agent_config(parse({"t.py"}), {}, &notice);
  CHECK_FALSE(a.env.contains("OMP_NUM_THREADS"));
}

TEST_CASE("cli: etcd, etcd-v2 and etcd-v3 are one backend over a list of members", "[cli]") {
  for (const char* name : {"etcd", "etcd-v2", "etcd-v3"}) {
    INFO(name);
    const auto c = parse({"--nnodes=2:3", std::string("--rdzv_backend=") + name,
                          "--rdzv_endpoint=e1:2381,[::1]:2382,e3", "t.py"});
    CHECK(c.rdzv.backend == ddprun::rendezvous::Backend::kEtcdV3);
    REQUIRE(c.rdzv.etcd_endpoints.size() == 3);
    CHECK(c.rdzv.etcd_endpoints[0].host == "e1");
    CHECK(c.rdzv.etcd_endpoints[0].port == 2381);
    CHECK(c.rdzv.etcd_endpoints[1].host == "::1");
    CHECK(c.rdzv.etcd_endpoints[1].port == 2382);
    CHECK(c.rdzv.etcd_endpoints[2].port == 2379);
    const auto a = make_agent_config(c, {}, nullptr);
    CHECK(a.rdzv.etcd_endpoints.size() == 3);
    CHECK(a.rdzv.endpoint_host == "e1");
    CHECK(a.rdzv.host_store == ddprun::rendezvous::RendezvousConfig::HostStore::kNo);
  }
  const auto p = make_agent_config(parse({"--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=e",
                                          "--rdzv_conf=etcd_prefix=/team/jobs", "t.py"}),
                                   {}, nullptr);
  CHECK(p.rdzv.etcd_prefix == "/team/jobs/");
  CHECK_THROWS_WITH(parse({"--rdzv_backend=etcd", "--rdzv_endpoint=e:1,", "t.py"}),
                    Catch::Contains("empty endpoint"));
  CHECK_THROWS_WITH(
      parse({"--rdzv_backend=etcd", "--rdzv_endpoint=e", "--rdzv_conf=etcd_prefix=x", "t.py"}),
      Catch::Contains("must start with /"));
}

TEST_CASE("cli: authentication options are read once and refused where they would not apply",
          "[cli]") {
  const std::string dir = std::filesystem::temp_directory_path() / "ddprun_cli_auth";
  std::filesystem::create_directories(dir);
  const std::string token = dir + "/token", password = dir + "/password";
  std::ofstream(token) << "0123456789abcdef0123456789abcdef\n";
  std::ofstream(password) << "s3cret\n";
  const auto job = [](std::string backend, std::string conf, std::string id = "job") {
    return parse({"--nnodes=2", "--rdzv_backend=" + backend, "--rdzv_endpoint=e:1",
                  "--rdzv_id=" + id, "--rdzv_conf=" + conf, "t.py"});
  };
  const auto c10d = job("c10d", "auth_token_file=" + token);
  REQUIRE(c10d.rdzv.auth_token);
  CHECK(c10d.rdzv.auth_token->bytes() == "0123456789abcdef0123456789abcdef");
  CHECK(make_agent_config(c10d, {}, nullptr).rdzv.auth_token.has_value());
  CHECK_THROWS_WITH(job("c10d", "auth_token_file=" + token, "a/b"), Catch::Contains("no '/'"));
  CHECK_THROWS_WITH(job("c10d", "auth_token_file=/no/token"),
                    Catch::Contains("cannot read the token file /no/token"));
  CHECK_THROWS_WITH(job("c10d", "auth_token_file=" + password),
                    Catch::Contains("at least 16 bytes"));
  CHECK_THROWS_WITH(job("etcd", "auth_token_file=" + token), Catch::Contains("user and password"));
  const auto etcd = job("etcd", "user=alice,password_file=" + password);
  REQUIRE(etcd.rdzv.etcd_login);
  CHECK(etcd.rdzv.etcd_login->user == "alice");
  CHECK(etcd.rdzv.etcd_login->password == "s3cret");
  CHECK_THROWS_WITH(job("etcd", "user=alice"), Catch::Contains("both user and password_file"));
  CHECK_THROWS_WITH(job("c10d", "user=alice,password_file=" + password),
                    Catch::Contains("for the etcd backend"));
  CHECK_THROWS_WITH(parse({"--metrics_addr=localhost", "t.py"}),
                    Catch::Contains("not an IP address"));
  CHECK(parse({"--metrics_addr=::", "t.py"}).metrics_addr == "::");
  CHECK(parse({"t.py"}).metrics_addr == "127.0.0.1");
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: TLS to a ddprun store comes with a token and a host's certificate", "[cli]") {
  const std::string dir = std::filesystem::temp_directory_path() / "ddprun_cli_tls";
  std::filesystem::create_directories(dir);
  const auto pki = ddprun::testing::make_test_certificates(dir, "node");
  const std::string token = dir + "/token";
  std::ofstream(token) << "0123456789abcdef0123456789abcdef\n";
  std::filesystem::permissions(token, std::filesystem::perms::owner_read);
  const std::string auth = "auth_token_file=" + token;
  const std::string ca = "cacert=" + pki.ca;
  const std::string own = "cert=" + pki.cert + ",key=" + pki.key;
  const auto job = [](std::string backend, std::string conf, std::string rank = "0") {
    return parse({"--nnodes=2", "--node_rank=" + rank, "--rdzv_backend=" + backend,
                  "--rdzv_endpoint=e:1", "--master_addr=e", "--rdzv_id=job", "--rdzv_conf=" + conf,
                  "t.py"});
  };
  CHECK_THROWS_WITH(job("c10d", "protocol=https," + ca), Catch::Contains("comes with a token"));
  // An agent that may host the store serves TLS: it needs its certificate.
  CHECK_THROWS_WITH(job("static", auth + "," + ca),
                    Catch::Contains("serves TLS with cert and key"));
  CHECK_THROWS_WITH(job("c10d", auth + ",is_host=true," + ca),
                    Catch::Contains("serves TLS with cert and key"));
  CHECK(job("static", auth + "," + ca, "1").rdzv.tls.enabled);  // node 1 is a client only
  const auto c10d = job("c10d", auth + "," + ca);  // the endpoint is not this host: ddprund's
  CHECK(c10d.rdzv.tls.enabled);
  CHECK(c10d.rdzv.tls.ca_file == pki.ca);
  CHECK(make_agent_config(c10d, {}, nullptr).rdzv.tls.enabled);
  const auto host = job("static", auth + "," + ca + "," + own);
  CHECK(host.rdzv.tls.cert_file == pki.cert);
  CHECK(host.rdzv.tls.key_file == pki.key);
  CHECK_THROWS_WITH(job("static", auth + "," + ca + ",cert=" + pki.cert + ",key=" + pki.ca),
                    Catch::Contains("cannot load the key"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: etcd TLS options are checked, under both spellings, before anything starts",
          "[cli]") {
  const auto etcd = [](std::string conf) {
    return parse(
        {"--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=e", "--rdzv_conf=" + conf, "t.py"});
  };
  CHECK_FALSE(etcd("join_timeout=5").rdzv.tls.enabled);
  const auto https = etcd("protocol=https");  // the system's trusted CAs
  CHECK(https.rdzv.tls.enabled);
  CHECK(make_agent_config(https, {}, nullptr).rdzv.tls.enabled);
  CHECK_THROWS_WITH(etcd("protocol=ftp"), Catch::Contains("must be http or https"));
  CHECK_THROWS_WITH(etcd("cacert=/no/ca.pem"),
                    Catch::Contains("cannot load the CA certificate '/no/ca.pem'"));
  CHECK_THROWS_WITH(etcd("ca_cert=/no/torch-ca.pem"),
                    Catch::Contains("cannot load the CA certificate '/no/torch-ca.pem'"));
  CHECK_THROWS_WITH(etcd("protocol=http,cacert=/no/ca.pem"),
                    Catch::Contains("given with protocol=http"));
  CHECK_THROWS_WITH(etcd("protocol=https,cert=/c.pem"), Catch::Contains("needs both cert and key"));
  CHECK_THROWS_WITH(etcd("protocol=https,ssl_cert_key=/k.pem"),
                    Catch::Contains("needs both cert and key"));
  CHECK_THROWS_WITH(etcd("cacert=/a.pem,ca_cert=/b.pem"),
                    Catch::Contains("cacert and ca_cert name different files"));
}

TEST_CASE("cli: --event_log and --metrics_port, and their PET_ variables", "[cli]") {
  const auto c = parse({"--event_log=/tmp/e.jsonl", "--metrics-port", "9100", "train.py"});
  CHECK(c.event_log == "/tmp/e.jsonl");
  CHECK(c.metrics_port == 9100);
  const auto e = parse({"train.py"}, {{"PET_EVENT_LOG", "/var/log/x"}, {"PET_METRICS_PORT", "0"}});
  CHECK(e.event_log == "/var/log/x");
  CHECK(e.metrics_port == 0);
  CHECK_FALSE(parse({"train.py"}).metrics_port);
  CHECK_THROWS_AS(parse({"--metrics_port=70000", "train.py"}), UsageError);
  CHECK(make_agent_config(c, {}, nullptr).event_log == "/tmp/e.jsonl");
}

TEST_CASE("cli: duplicate filters split at commas, and a doubled comma is a comma", "[cli]") {
  const auto c = parse({"--duplicate-stdout-filters", "loss,,step,acc",
                        "--duplicate_stderr_filters", "Error", "t.py"});
  CHECK(c.duplicate_stdout_filters == std::vector<std::string>{"loss,step", "acc"});
  CHECK(c.duplicate_stderr_filters == std::vector<std::string>{"Error"});
  CHECK(parse({"--duplicate-stdout-filters", "a,,,b", "t.py"}).duplicate_stdout_filters ==
        std::vector<std::string>{"a,", "b"});
  CHECK(parse({"t.py"}).duplicate_stdout_filters.empty());
  const auto pet = parse({"t.py"}, {{"PET_DUPLICATE_STDERR_FILTERS", "x,y"}});
  CHECK(pet.duplicate_stderr_filters == std::vector<std::string>{"x", "y"});
  const auto a = make_agent_config(c, {}, nullptr);
  CHECK(a.duplicate_stdout_filters == c.duplicate_stdout_filters);
}

TEST_CASE("cli: the line prefix template comes from the flag, else torch's variable", "[cli]") {
  const Environment env = {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${rank}> "}};
  CHECK(parse({"t.py"}, env).log_line_prefix_template == "${rank}> ");
  CHECK(
      parse({"--log-line-prefix-template", "${hostname}:", "t.py"}, env).log_line_prefix_template ==
      "${hostname}:");
  CHECK(parse({"t.py"}, {{"PET_LOG_LINE_PREFIX_TEMPLATE", "[$rank]"}}).log_line_prefix_template ==
        "[$rank]");
  CHECK(parse({"t.py"}).log_line_prefix_template.empty());
}

TEST_CASE("cli: numa binding and logs specs take no PET_ variable, as in torchrun", "[cli]") {
  CHECK(parse({"--numa-binding=core-complex", "t.py"}).numa_binding ==
        ddprun::agent::NumaMode::kCoreComplex);
  CHECK_FALSE(parse({"t.py"}, {{"PET_NUMA_BINDING", "node"}}).numa_binding.has_value());
  CHECK_NOTHROW(parse({"t.py"}, {{"PET_LOGS_SPECS", "custom"}}));
  CHECK(make_agent_config(parse({"--numa_binding", "socket", "t.py"}), {}, nullptr).numa_binding ==
        ddprun::agent::NumaMode::kSocket);
}

TEST_CASE("cli: every event log handler of torch 2.14 is accepted; console prints events",
          "[cli]") {
  CHECK(parse({"t.py"}).event_log_handler == EventLogHandler::kNull);
  CHECK(parse({"--event-log-handler=console", "t.py"}).event_log_handler ==
        EventLogHandler::kConsole);
  CHECK(parse({"--event_log_handler", "dynamic_rendezvous", "t.py"}).event_log_handler ==
        EventLogHandler::kDynamicRendezvous);
  CHECK(make_agent_config(parse({"--event-log-handler=console", "t.py"}), {}, nullptr)
            .events_to_console);
  CHECK_FALSE(make_agent_config(parse({"t.py"}), {}, nullptr).events_to_console);
}

TEST_CASE("cli: --print-completion prints the shell's script without a training script", "[cli]") {
  for (const char* shell : {"bash", "zsh", "tcsh"}) {
    INFO(shell);
    try {
      parse({"--print-completion", shell});
      FAIL("no completion");
    } catch (const CompletionRequested& c) {
      CHECK_THAT(c.script, Catch::Contains("ddprun"));
      CHECK_THAT(c.script, Catch::Contains("nproc_per_node"));
      CHECK_THAT(c.script, Catch::Contains("core-complex"));
      CHECK_THAT(c.script, !Catch::Contains("head_control"));
    }
  }
}

TEST_CASE("launch: without --use-env the script gets --local-rank=N before its arguments",
          "[cli]") {
  const auto c =
      parse_command_line({"--nproc_per_node=2", "--master_port=29500", "train.py", "--lr", "1"}, {},
                         Dialect::kDistributedLaunch);
  CHECK(c.local_rank_argument == "--local-rank");
  const auto a = make_agent_config(c, {{"PYTHON_EXEC", "py"}}, nullptr);
  CHECK(a.entrypoint == std::vector<std::string>{"py", "-u", "train.py",
                                                 "--local-rank=${local_rank}", "--lr", "1"});
  const auto legacy =
      parse_command_line({"--legacy_local_rank", "train.py"}, {}, Dialect::kDistributedLaunch);
  CHECK(legacy.local_rank_argument == "--local_rank");
  for (const char* use_env : {"--use-env", "--use_env"}) {
    CHECK(parse_command_line({use_env, "train.py"}, {}, Dialect::kDistributedLaunch)
              .local_rank_argument.empty());
  }
  // torch.distributed.launch reads no PET_ variable for it.
  CHECK(parse_command_line({"train.py"}, {{"PET_USE_ENV", "1"}}, Dialect::kDistributedLaunch)
            .local_rank_argument == "--local-rank");
  CHECK_THROWS_WITH(parse_command_line({"--no-python", "train"}, {}, Dialect::kDistributedLaunch),
                    Catch::Contains("you must also set the '--use-env' flag"));
  // torchrun itself has no --use-env.
  CHECK_THROWS_WITH(parse({"--use-env", "train.py"}),
                    Catch::Contains("unrecognized arguments: --use-env"));
  CHECK(parse({"train.py"}).local_rank_argument.empty());
}

TEST_CASE("cli: --health_check and its timeout reach the agent and PET_ variables are fallbacks",
          "[cli]") {
  auto c = parse({"--health_check", "nvidia-smi -L", "--health-check-timeout=2.5", "t.py"});
  const auto a = make_agent_config(c, {}, nullptr);
  CHECK(a.health_check == "nvidia-smi -L");
  CHECK(a.health_check_timeout == std::chrono::milliseconds(2500));
  c = parse({"t.py"}, {{"PET_HEALTH_CHECK", "true"}});
  CHECK(c.health_check == "true");
  CHECK(c.health_check_timeout == std::chrono::seconds(60));
  CHECK_THROWS_AS(parse({"--health_check_timeout=0", "t.py"}), UsageError);
  CHECK_THROWS_AS(parse({"--health_check_timeout=soon", "t.py"}), UsageError);
}

TEST_CASE("cli: --node_check, its factor and timeout are read, PET_NODE_CHECK too", "[cli]") {
  auto c = parse({"--node_check", "--node-check-factor=1.5", "--node_check_timeout=4", "t.py"});
  CHECK(c.node_check);
  CHECK(c.node_check_factor == 1.5);
  CHECK(c.node_check_timeout == std::chrono::seconds(4));
  c = parse({"t.py"});
  CHECK_FALSE(c.node_check);
  CHECK(c.node_check_factor == 2.0);
  CHECK(c.node_check_timeout == std::chrono::seconds(30));
  CHECK(parse({"t.py"}, {{"PET_NODE_CHECK", "1"}}).node_check);
  for (const char* bad :
       {"--node_check_factor=1", "--node_check_factor=0.5", "--node_check_factor=fast",
        "--node_check_timeout=0", "--node_check_timeout=-3"}) {
    CHECK_THROWS_AS(parse({bad, "t.py"}), UsageError);
  }
  // The agent runs the probe beside ddprun: this test program has none beside it.
  CHECK_THROWS_WITH(make_agent_config(parse({"--node_check", "t.py"}), {}, nullptr),
                    Catch::Contains("--node_check needs the probe program") &&
                        Catch::Contains("ddprun-node-probe"));
  CHECK(make_agent_config(parse({"t.py"}), {}, nullptr).node_probe.empty());
}

TEST_CASE("cli: the straggler check's threshold, steps and action reach the agent, PET_ too",
          "[cli]") {
  using Action = ddprun::agent::StragglerPolicy::Action;
  auto c = parse(
      {"--straggler_threshold=0.35", "--straggler-steps=8", "--straggler_action=replace", "t.py"});
  const auto a = make_agent_config(c, {}, nullptr);
  CHECK(a.straggler.threshold == 0.35);
  CHECK(a.straggler.steps == 8);
  CHECK(a.straggler.action == Action::kReplace);
  c = parse({"t.py"});
  CHECK(c.straggler.threshold == 0.2);
  CHECK(c.straggler.steps == 5);
  CHECK(c.straggler.action == Action::kReport);
  CHECK(c.straggler.watched());
  CHECK_FALSE(parse({"--straggler_threshold=0", "t.py"}).straggler.watched());
  CHECK(parse({"t.py"}, {{"PET_STRAGGLER_ACTION", "replace"}}).straggler.action ==
        Action::kReplace);
  for (const char* bad :
       {"--straggler_threshold=-0.1", "--straggler_threshold=slow", "--straggler_steps=0",
        "--straggler_steps=many", "--straggler_action=kill"}) {
    CHECK_THROWS_AS(parse({bad, "t.py"}), UsageError);
  }
}

TEST_CASE("cli: TORCHELASTIC_ENABLE_FILE_TIMER gives every worker the timer FIFO's path", "[cli]") {
  auto a = make_agent_config(parse({"t.py"}), {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}, nullptr);
  REQUIRE_FALSE(a.timer_file.empty());
  CHECK(a.timer_file.starts_with("/tmp/watchdog_timer_"));
  CHECK(a.env.at("TORCHELASTIC_TIMER_FILE") == a.timer_file);
  a = make_agent_config(
      parse({"t.py"}),
      {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", "/run/t"}}, nullptr);
  CHECK(a.timer_file == "/run/t");
  a = make_agent_config(parse({"t.py"}), {{"TORCHELASTIC_ENABLE_FILE_TIMER", "0"}}, nullptr);
  CHECK(a.timer_file.empty());
  CHECK_FALSE(a.env.contains("TORCHELASTIC_TIMER_FILE"));
}

TEST_CASE("cli: TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT is read as torch reads it", "[cli]") {
  const auto timeout = [](const char* value) {
    return make_agent_config(parse({"t.py"}),
                             {{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", value}}, nullptr)
        .uninterruptible_timeout;
  };
  CHECK(timeout("2.5") == std::chrono::milliseconds(2500));
  CHECK(timeout("0").count() == 0);
  CHECK(timeout("-3").count() == 0);
  CHECK(timeout("soon").count() == 0);
  CHECK(timeout("").count() == 0);
  CHECK(timeout(" 30\n") == std::chrono::milliseconds(30000));  // float() reads past blanks
  CHECK(timeout("0x10").count() == 0);                          // and reads no hexadecimal
  CHECK(make_agent_config(parse({"t.py"}), {}, nullptr).uninterruptible_timeout.count() == 0);
}

TEST_CASE("cli: --hang_timeout takes seconds or auto and PET_HANG_TIMEOUT is its fallback",
          "[cli]") {
  using Mode = ddprun::agent::HangPolicy::Mode;
  CHECK(parse({"t.py"}).hang.mode == Mode::kOff);
  auto c = parse({"--hang_timeout=2.5", "t.py"});
  CHECK(c.hang.mode == Mode::kFixed);
  CHECK(c.hang.timeout == std::chrono::milliseconds(2500));
  CHECK(parse({"--hang-timeout", "auto", "t.py"}).hang.mode == Mode::kAuto);
  CHECK(parse({"t.py"}, {{"PET_HANG_TIMEOUT", "auto"}}).hang.mode == Mode::kAuto);
  CHECK(make_agent_config(parse({"--hang_timeout=3", "t.py"}), {}, nullptr).hang.timeout ==
        std::chrono::seconds(3));
  CHECK_THROWS_AS(parse({"--hang_timeout=0", "t.py"}), UsageError);
  CHECK_THROWS_AS(parse({"--hang_timeout=never", "t.py"}), UsageError);
}

TEST_CASE("cli: --preload takes module names or auto and rejects anything else", "[cli]") {
  CHECK(parse({"train.py"}).preload.modules.empty());
  CHECK(parse({"--preload=auto", "train.py"}).preload.modules == std::vector<std::string>{"auto"});
  CHECK(parse({"--preload", "torch,numpy.linalg,_priv", "train.py"}).preload.modules ==
        std::vector<std::string>{"torch", "numpy.linalg", "_priv"});
  CHECK(parse({"train.py"}, {{"PET_PRELOAD", "torch"}}).preload.modules ==
        std::vector<std::string>{"torch"});
  for (const char* bad : {"--preload=1torch", "--preload=torch,", "--preload=.torch",
                          "--preload=torch..nn", "--preload=auto,torch", "--preload=a b"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse({bad, "train.py"}), UsageError);
  }
}

TEST_CASE("cli: --preload reaches Python workers' agent and not --no_python's", "[cli]") {
  Environment env;
  const auto python = make_agent_config(parse({"--preload=torch", "train.py"}), env, nullptr);
  CHECK(python.preload.modules == std::vector<std::string>{"torch"});
  const auto native =
      make_agent_config(parse({"--preload=torch", "--no_python", "/bin/true"}), env, nullptr);
  CHECK(native.preload.modules.empty());
}
