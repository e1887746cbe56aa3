// The inputs of the three launcher kinds: Slurm's host lists and task counts, Slurm's and Open
// MPI's variables as a placement, hostfiles, and the command a head runs on each host.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "agent_config.hpp"
#include "ddprun/agent/gpu_health.hpp"
#include "hostfile.hpp"
#include "hostlist.hpp"
#include "launch_config.hpp"
#include "remote_command.hpp"
#include "scheduler_env.hpp"

using namespace ddprun::launcher;
using ddprun::agent::Environment;
using Strings = std::vector<std::string>;

TEST_CASE("hostlist: ranges, zero padding, several groups and plain names expand in order",
          "[hostlist]") {
  CHECK(expand_hostlist("node[01-04,07],gpu-[1-2]") ==
        Strings{"node01", "node02", "node03", "node04", "node07", "gpu-1", "gpu-2"});
  CHECK(expand_hostlist("a") == Strings{"a"});
  CHECK(expand_hostlist("n[8-11]") == Strings{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[098-101]") == Strings{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("rack[1-2]-n[1-2]") ==
        Strings{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(expand_hostlist("x[3]y,z w") == Strings{"x3y", "z", "w"});
  CHECK(expand_hostlist("h[1-3]").size() == 3);
}

TEST_CASE("hostlist: malformed lists are errors that quote the list", "[hostlist]") {
  for (const char* bad : {"", ",", "n[1-2", "n1-2]", "n[]", "n[2-1]", "n[a-b]", "n[1-]", "n[[1-2]]",
                          "n[1,,2]", "n[0-99999999999999999999]", "n[0-2000000]"}) {
    INFO(bad);
    CHECK_THROWS_AS(expand_hostlist(bad), std::invalid_argument);
  }
  CHECK_THROWS_WITH(expand_hostlist("n[2-1]"), Catch::Contains("'n[2-1]'"));
  // Multiplying groups is bounded too.
  CHECK_THROWS_AS(expand_hostlist("a[0-999]b[0-999]c[0-999]"), std::invalid_argument);
}

TEST_CASE("hostlist: task counts expand their repeats", "[hostlist]") {
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("8") == std::vector<int>{8});
  for (const char* bad : {"", "2(x0)", "2(x3", "x", "2,", "-1"}) {
    INFO(bad);
    CHECK_THROWS_AS(expand_tasks_per_node(bad), std::invalid_argument);
  }
}

namespace {
Environment slurm_step(int node, int tasks_per_node, int local, int nodes = 2) {
  const int procid = node * tasks_per_node + local;
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_JOB_NUM_NODES", "9"},  // the step's count wins over the allocation's
          {"SLURM_STEP_NUM_NODES", std::to_string(nodes)},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_STEP_NODELIST", "gpu[07-08]"},
          {"SLURM_JOB_NODELIST", "gpu[01-09]"},
          {"SLURM_STEP_TASKS_PER_NODE", fmt::format("{}(x{})", tasks_per_node, nodes)},
          {"SLURM_LOCALID", std::to_string(local)},
          {"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(nodes * tasks_per_node)}};
}
LaunchConfig parse(std::vector<std::string> args, Environment env = {}) {
  return parse_command_line(args, env);
}
}  // namespace

TEST_CASE("slurm: one task per node makes ddprun the node's agent of a static job", "[slurm]") {
  const LaunchConfig c = parse({"--nproc_per_node=4", "train.py"}, slurm_step(1, 1, 0));
  CHECK(c.rdzv.min_nodes == 2);
  CHECK(c.rdzv.max_nodes == 2);
  CHECK(c.rdzv.node_rank == 1);
  CHECK(c.rdzv.master_addr == "gpu07");
  CHECK(c.rdzv.run_id == "4242");
  CHECK(c.rdzv.nproc == 4);
  CHECK(!c.placement);
  CHECK(c.rdzv.store_port >= 20000);
  CHECK(c.rdzv.store_port < 30000);
  // Every node derives the same port; another step of the job another one.
  CHECK(parse({"train.py"}, slurm_step(0, 1, 0)).rdzv.store_port == c.rdzv.store_port);
  Environment other_step = slurm_step(0, 1, 0);
  other_step["SLURM_STEP_ID"] = "1";
  CHECK(parse({"train.py"}, other_step).rdzv.store_port != c.rdzv.store_port);
  CHECK_THAT(c.scheduler_notice, Catch::Contains("Slurm job 4242") &&
                                     Catch::Contains("--node_rank=1") &&
                                     Catch::Contains("--master_addr=gpu07"));
}

TEST_CASE("slurm: several tasks per node make each task one placed worker", "[slurm]") {
  const LaunchConfig c = parse({"train.py"}, slurm_step(1, 4, 2));
  CHECK(c.rdzv.nproc == 1);
  CHECK(c.rdzv.max_nodes == 8);  // one rendezvous member per task
  CHECK(c.rdzv.node_rank == 6);  // = SLURM_PROCID, so RANK = SLURM_PROCID
  REQUIRE(c.placement);
  CHECK(c.placement->local_rank == 2);
  CHECK(c.placement->local_world_size == 4);
  CHECK(c.placement->node_rank == 1);
  CHECK(c.placement->num_nodes == 2);
  CHECK(make_agent_config(c, {}, nullptr).placement->local_rank == 2);
  CHECK_THROWS_WITH(parse({"--nproc_per_node=4", "train.py"}, slurm_step(1, 4, 2)),
                    Catch::Contains("one worker per task"));
  CHECK_THROWS_WITH(
      parse({"--rdzv_backend=c10d", "--rdzv_endpoint=h:1", "train.py"}, slurm_step(1, 4, 2)),
      Catch::Contains("per-process"));
}

TEST_CASE("slurm: explicit options and MASTER_* win, --no_slurm ignores it all", "[slurm]") {
  Environment env = slurm_step(1, 1, 0);
  const LaunchConfig c =
      parse({"--master_addr=head", "--rdzv_id=mine", "--node_rank=0", "train.py"}, env);
  CHECK(c.rdzv.master_addr == "head");
  CHECK(c.rdzv.run_id == "mine");
  CHECK(c.rdzv.node_rank == 0);
  CHECK(c.rdzv.max_nodes == 2);
  env["MASTER_PORT"] = "23456";
  env["MASTER_ADDR"] = "10.0.0.1";
  const LaunchConfig m = parse({"train.py"}, env);
  CHECK(m.rdzv.store_port == 23456);
  CHECK(m.rdzv.master_addr == "10.0.0.1");
  const LaunchConfig off = parse({"--no_slurm", "--master_port=29500", "train.py"}, env);
  CHECK(off.rdzv.max_nodes == 1);
  CHECK(off.rdzv.run_id == "none");
  CHECK(off.scheduler_notice.empty());
  // c10d given: Slurm still fills the node count and run id, not the static options.
  const LaunchConfig dyn = parse({"--rdzv_backend=c10d", "--rdzv_endpoint=store:29400", "train.py"},
                                 slurm_step(1, 1, 0));
  CHECK(dyn.rdzv.max_nodes == 2);
  CHECK(dyn.rdzv.run_id == "4242");
  CHECK(dyn.rdzv.endpoint_host == "store");
}

TEST_CASE("slurm: a batch script outside srun is this node only", "[slurm]") {
  Environment env = {{"SLURM_JOB_ID", "77"},
                     {"SLURM_JOB_NUM_NODES", "2"},
                     {"SLURM_NODEID", "0"},
                     {"SLURM_JOB_NODELIST", "node[1-2]"},
                     {"SLURM_TASKS_PER_NODE", "1(x2)"},
                     {"SLURM_PROCID", "0"}};
  const LaunchConfig c = parse({"--nproc_per_node=2", "train.py"}, env);
  CHECK(c.rdzv.max_nodes == 1);
  CHECK(c.rdzv.nproc == 2);
  CHECK_THAT(c.scheduler_notice, Catch::Contains("not an srun step"));
  // As torchrun runs one node: c10d on a port the OS picks, a fresh run id each launch, so that two
  // launches of one batch script never meet on one port (MASTER_PORT, which torchrun does not
  // read, included).
  env["MASTER_PORT"] = "29500";
  const LaunchConfig again = parse({"--nproc_per_node=2", "train.py"}, env);
  for (const LaunchConfig* l : {&c, &again}) {
    CHECK(l->rdzv.backend == ddprun::rendezvous::Backend::kC10d);
    CHECK(l->rdzv.store_port == 0);
  }
  CHECK(c.rdzv.run_id != again.rdzv.run_id);
  // --standalone is one node by definition: Slurm's variables change nothing.
  const LaunchConfig s = parse({"--standalone", "train.py"}, slurm_step(1, 1, 0));
  CHECK(s.rdzv.max_nodes == 1);
  CHECK(s.scheduler_notice.empty());
}

TEST_CASE("slurm: --nproc_per_node=gpu counts SLURM_GPUS_ON_NODE", "[slurm]") {
  Environment env = slurm_step(0, 1, 0);
  env["SLURM_GPUS_ON_NODE"] = "8";
  CHECK(parse({"--nproc_per_node=gpu", "train.py"}, env).rdzv.nproc == 8);
  env["SLURM_GPUS_ON_NODE"] = "eight";
  CHECK_THROWS_WITH(parse({"--nproc_per_node=gpu", "train.py"}, env),
                    Catch::Contains("SLURM_GPUS_ON_NODE"));
}

TEST_CASE("slurm: per process, --virtual_local_rank needs a device for this task's local rank",
          "[slurm]") {
  Environment env = slurm_step(1, 4, 3);  // local rank 3 of the node's 4 tasks
  env["CUDA_VISIBLE_DEVICES"] = "0";      // srun --gpus-per-task=1
  CHECK_THROWS_WITH(parse({"--virtual_local_rank", "train.py"}, env),
                    Catch::Contains("local rank 3 exceeds the devices of CUDA_VISIBLE_DEVICES=0"));
  env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3";
  CHECK(parse({"--virtual_local_rank", "train.py"}, env).virtual_local_rank);
}

TEST_CASE("slurm: CUDA_VISIBLE_DEVICES narrowed inside the allocation wins over its GPU count",
          "[slurm]") {
  Environment env = slurm_step(0, 1, 0);
  env["SLURM_GPUS_ON_NODE"] = "8";
  env["CUDA_VISIBLE_DEVICES"] = "0,1";
  // As torch.cuda.device_count(): the two named, of the GPUs this machine has (none here: the
  // launch is refused for want of a GPU, never 8 workers).
  const int here = static_cast<int>(ddprun::agent::gpu_device_nodes());
  if (here == 0) {
    CHECK_THROWS_AS(parse({"--nproc_per_node=gpu", "train.py"}, env), UsageError);
  } else {
    CHECK(parse({"--nproc_per_node=gpu", "train.py"}, env).rdzv.nproc == std::min(2, here));
  }
}

TEST_CASE("slurm: malformed or contradicting variables are usage errors naming them", "[slurm]") {
  Environment env = slurm_step(1, 1, 0);
  env["SLURM_STEP_NODELIST"] = "gpu[07-";
  CHECK_THROWS_WITH(parse({"train.py"}, env), Catch::Contains("SLURM_STEP_NODELIST"));
  env = slurm_step(1, 1, 0);
  env["SLURM_NODEID"] = "5";
  CHECK_THROWS_AS(parse({"train.py"}, env), UsageError);
  env = slurm_step(1, 1, 0);
  env["SLURM_PROCID"] = "-1";
  CHECK_THROWS_WITH(parse({"train.py"}, env), Catch::Contains("SLURM_PROCID"));
  CHECK_NOTHROW(parse({"--no_slurm", "train.py"}, env));
}

TEST_CASE("mpi: Open MPI's variables place one worker per process", "[mpi]") {
  const Environment env = {{"OMPI_COMM_WORLD_SIZE", "4"},
                           {"OMPI_COMM_WORLD_RANK", "3"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                           {"OMPI_COMM_WORLD_NODE_RANK", "1"},
                           {"PMIX_NAMESPACE", "prterun-x-1@1"},
                           {"MASTER_ADDR", "node-a"}};
  const LaunchConfig c = parse({"train.py"}, env);
  CHECK(c.rdzv.max_nodes == 4);
  CHECK(c.rdzv.node_rank == 3);
  CHECK(c.rdzv.master_addr == "node-a");
  CHECK(c.rdzv.run_id == "prterun-x-1@1");
  REQUIRE(c.placement);
  CHECK(c.placement->local_rank == 1);
  CHECK(c.placement->node_rank == 1);  // ranks 2 and 3 are the second node's
  CHECK(c.placement->num_nodes == 2);
  Environment no_master = env;
  no_master.erase("MASTER_ADDR");
  CHECK_THROWS_WITH(parse({"train.py"}, no_master), Catch::Contains("--master_addr"));
  // One node: rank 0 is on this host.
  const LaunchConfig local = parse({"train.py"}, {{"OMPI_COMM_WORLD_SIZE", "2"},
                                                  {"OMPI_COMM_WORLD_RANK", "1"},
                                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  CHECK(local.rdzv.master_addr == "127.0.0.1");
  CHECK(local.rdzv.node_rank == 1);
}

TEST_CASE("hostfile: slots, comments and blank lines; mistakes name the line", "[hostfile]") {
  const auto hosts = parse_hostfile(
      "# cluster\n\nworker-0 slots=4\nworker-1 slots=8 max_slots=8 # big\n  worker-2\n", "hf");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0] == HostSlots{"worker-0", 4});
  CHECK(hosts[1] == HostSlots{"worker-1", 8});
  CHECK(hosts[2] == HostSlots{"worker-2", std::nullopt});
  CHECK_THROWS_WITH(parse_hostfile("a slots=2\nb\na slots=1\n", "hf"),
                    Catch::Contains("hf line 3") && Catch::Contains("twice"));
  CHECK_THROWS_WITH(parse_hostfile("a slots=0\n", "hf"), Catch::Contains("hf line 1"));
  CHECK_THROWS_WITH(parse_hostfile("a gpus=2\n", "hf"), Catch::Contains("slots=N"));
  CHECK_THROWS_WITH(parse_hostfile("# nothing\n", "hf"), Catch::Contains("no host"));
  CHECK_THROWS_AS(parse_hostfile("-oProxyCommand=x slots=1\n", "hf"), std::invalid_argument);
}

TEST_CASE("hostfile: -H lists and --include/--exclude keep the hosts' order", "[hostfile]") {
  const auto hosts = parse_host_list("h1:4,h2:4,h3");
  CHECK(hosts == std::vector<HostSlots>{{"h1", 4}, {"h2", 4}, {"h3", std::nullopt}});
  CHECK_THROWS_AS(parse_host_list("h1:x"), std::invalid_argument);
  CHECK_THROWS_AS(parse_host_list("h1,h1"), std::invalid_argument);
  CHECK(select_hosts(hosts, "h3@h1", "") ==
        std::vector<HostSlots>{{"h1", 4}, {"h3", std::nullopt}});
  CHECK(select_hosts(hosts, "", "h2") == std::vector<HostSlots>{{"h1", 4}, {"h3", std::nullopt}});
  CHECK_THROWS_WITH(select_hosts(hosts, "h9", ""), Catch::Contains("h9"));
  CHECK_THROWS_WITH(select_hosts(hosts, "h1:0,1", ""), Catch::Contains("not supported"));
  CHECK_THROWS_AS(select_hosts(hosts, "", "h1@h2@h3"), std::invalid_argument);
}

TEST_CASE("head: options of a head-node launch are checked before anything starts", "[head]") {
  const LaunchConfig c = parse({"-H", "a:2,b:3", "--env", "X=1", "--env", "Y", "train.py", "--lr"});
  CHECK(c.hosts.size() == 2);
  CHECK(c.rdzv.max_nodes == 2);
  CHECK(c.rdzv.master_addr == "a");
  CHECK(c.rdzv.run_id.size() == 32);
  CHECK(c.env_vars == Strings{"X=1", "Y"});
  CHECK(c.training_script_args == Strings{"--lr"});
  CHECK_THROWS_WITH(parse({"-H", "a", "--nnodes=2", "t.py"}), Catch::Contains("--nnodes"));
  CHECK_THROWS_WITH(parse({"-H", "a", "--rdzv_backend=c10d", "t.py"}),
                    Catch::Contains("static store"));
  CHECK_THROWS_WITH(parse({"--env", "X=1", "t.py"}), Catch::Contains("--hostfile or -H"));
  CHECK_THROWS_WITH(parse({"-H", "a", "--env", "1X=2", "t.py"}), Catch::Contains("variable name"));
  CHECK_THROWS_WITH(parse({"--hostfile=/nonexistent/hf", "t.py"}),
                    Catch::Contains("cannot read it"));
  CHECK_THROWS_AS(parse({"-H", "a", "--ssh_port=70000", "t.py"}), UsageError);
  // The hosts decide GPUs, not the head.
  CHECK_NOTHROW(parse({"-H", "a", "--nproc_per_node=gpu", "t.py"}));
}

namespace {
// What /bin/sh prints running `set -- COMMAND` then printing each word NUL-separated; a COMMAND
// of "x; CMD" runs CMD instead, which prints for itself.
Strings words_of(const std::string& command) {
  const std::string script =
      "set -- " + command + "; for w in \"$@\"; do printf '%s\\0' \"$w\"; done";
  FILE* p = ::popen(("/bin/sh -c " + shell_quote(script)).c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  REQUIRE(WEXITSTATUS(::pclose(p)) == 0);
  Strings words;
  for (size_t start = 0, end; (end = out.find('\0', start)) != std::string::npos; start = end + 1) {
    words.push_back(out.substr(start, end - start));
  }
  return words;
}
}  // namespace

TEST_CASE("head: every argument reaches the host's shell byte for byte", "[head]") {
  const Strings awkward = {"a b", "it's", "say \"hi\"", "ünïcødé ✓", "$HOME", "`id`",
                           "*",   "",     "x\ny",       "\\",        "'",     "--flag=1 2"};
  std::string command;
  for (const auto& a : awkward) command += " " + shell_quote(a);
  CHECK(words_of(command) == awkward);
}

TEST_CASE("head: each host's agent gets a static job, its rank and the head's options", "[head]") {
  const LaunchConfig c = parse({"-H", "a:2,b", "--max_restarts=3", "--tee=3", "--log_dir=logs",
                                "--master_port=23000", "--rdzv_id=r1", "--health_check=test -e /ok",
                                "--health_check_timeout=7", "-m", "pkg.train", "--x", "y z"});
  const Strings args = agent_arguments(c, 1);
  CHECK(args.back() == "y z");
  // What the host's ddprun makes of them.
  const LaunchConfig host = parse(args);
  CHECK(host.head_control);
  CHECK(host.no_slurm);
  CHECK(host.rdzv.backend == ddprun::rendezvous::Backend::kStatic);
  CHECK(host.rdzv.max_nodes == 2);
  CHECK(host.rdzv.node_rank == 1);
  CHECK(host.rdzv.master_addr == "a");
  CHECK(host.rdzv.store_port == 23000);
  CHECK(host.rdzv.run_id == "r1");
  CHECK(host.rdzv.nproc == 1);  // b has no slots
  CHECK(parse(agent_arguments(c, 0)).rdzv.nproc == 2);
  CHECK(host.rdzv.max_restarts == 3);
  CHECK(host.tee.at(0) == ddprun::agent::Std::kAll);
  CHECK(host.log_dir == "logs");
  CHECK(host.health_check == "test -e /ok");
  CHECK(host.health_check_timeout == std::chrono::seconds(7));
  CHECK(host.module);
  CHECK(host.training_script == "pkg.train");
  CHECK(host.training_script_args == Strings{"--x", "y z"});
  // --nproc_per_node given wins over slots.
  const LaunchConfig n = parse({"-H", "a:2,b", "--nproc_per_node=4", "t.py"});
  CHECK(parse(agent_arguments(n, 0)).rdzv.nproc == 4);

  // Run as the host's shell runs it, with a stand-in for ddprun that prints where it runs, its
  // environment variable and its arguments.
  char dir_template[] = "/tmp/ddprun kinds XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template, fake = dir + "/dd prun";
  FILE* f = std::fopen(fake.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs("#!/bin/sh\nprintf '%s\\0' \"$PWD\" \"$K\" \"$@\"\n", f);
  std::fclose(f);
  ::chmod(fake.c_str(), 0755);
  const std::string remote = remote_shell_command(dir, {{"K", "v 'w'"}}, fake, args);
  const Strings words = words_of("x; " + remote);
  std::filesystem::remove_all(dir);
  REQUIRE(words.size() == args.size() + 2);
  CHECK(words[0] == dir);
  CHECK(words[1] == "v 'w'");
  CHECK(Strings(words.begin() + 2, words.end()) == args);
}

TEST_CASE("head: every option the head was given reaches each host's agent, PET_ ones too",
          "[head]") {
  const Strings given = {"-H",
                         "a,b",
                         "--restart_mode=in_process",
                         "--standby_workers=1",
                         "--crash_loop_attempts=0",
                         "--checkpoint_dir=/ck",
                         "--checkpoint_persist_every=7",
                         "--checkpoint_memory_limit=1G",
                         "--no_checkpoint_peer_copies",
                         "--node_check",
                         "--node_check_factor=3",
                         "--straggler_threshold=0.3",
                         "--straggler_action=replace",
                         "--numa_binding=node",
                         "--log_line_prefix_template=X${rank}",
                         "--duplicate_stdout_filters=loss",
                         "--event_log_handler=console",
                         "t.py"};
  const LaunchConfig c = parse(given, {{"PET_STRAGGLER_STEPS", "9"}});
  const Strings args = agent_arguments(c, 1);
  const LaunchConfig host = parse(args);
  CHECK(host.restart_mode == c.restart_mode);
  CHECK(host.standby_workers == 1);
  CHECK(host.crash_loop_attempts == 0);
  CHECK(host.checkpoint_dir == "/ck");
  CHECK(host.checkpoint_persist_every == 7);
  CHECK(host.checkpoint_memory_limit == c.checkpoint_memory_limit);
  CHECK_FALSE(host.checkpoint_peer_copies);
  CHECK(host.node_check);
  CHECK(host.node_check_factor == 3.0);
  CHECK(host.straggler.threshold == 0.3);
  CHECK(host.straggler.steps == 9);  // from the head's PET_STRAGGLER_STEPS
  CHECK(host.straggler.action == c.straggler.action);
  CHECK(host.numa_binding == c.numa_binding);
  CHECK(host.log_line_prefix_template == "X${rank}");
  CHECK(host.duplicate_stdout_filters == Strings{"loss"});
  CHECK(host.event_log_handler == EventLogHandler::kConsole);
  // Not one option of the head's is left out but those a head alone reads (its hosts, ssh's).
  const std::set<std::string> head_only = {"hosts",    "hostfile",     "include",    "exclude",
                                           "ssh_port", "ssh_identity", "ssh_option", "env"};
  for (const std::string& dest : c.given) {
    if (head_only.contains(dest)) continue;
    CAPTURE(dest);
    CHECK(std::any_of(args.begin(), args.end(), [&](const std::string& a) {
      return a == "--" + dest || a.rfind("--" + dest + "=", 0) == 0;
    }));
  }
}

TEST_CASE("head: under ddprun launch each host's agent speaks torch.distributed.launch too",
          "[head]") {
  const LaunchConfig c = parse_command_line({"-H", "a,b", "--legacy_local_rank", "t.py", "--x"}, {},
                                            Dialect::kDistributedLaunch);
  const Strings args = agent_arguments(c, 0);
  REQUIRE(args.front() == "launch");
  const LaunchConfig host =
      parse_command_line(Strings(args.begin() + 1, args.end()), {}, Dialect::kDistributedLaunch);
  CHECK(host.local_rank_argument == "--local_rank");
  CHECK(host.training_script_args == Strings{"--x"});
  // Without --use-env the script is given its local rank; with it, not.
  const LaunchConfig env =
      parse_command_line({"-H", "a", "--use_env", "t.py"}, {}, Dialect::kDistributedLaunch);
  const Strings env_args = agent_arguments(env, 0);
  CHECK(parse_command_line(Strings(env_args.begin() + 1, env_args.end()), {},
                           Dialect::kDistributedLaunch)
            .local_rank_argument.empty());
}

TEST_CASE("head: ssh never prompts and the user's ssh options come first", "[head]") {
  const LaunchConfig c = parse(
      {"-H", "a", "--ssh_port=2222", "--ssh_identity=/k", "--ssh_option=ConnectTimeout=3", "t.py"});
  const Strings argv = ssh_command(c, "a", "cmd", 10);
  CHECK(argv.front() == "ssh");
  CHECK(argv[2] == "ConnectTimeout=3");  // ssh keeps the first value it reads
  CHECK(std::find(argv.begin(), argv.end(), "BatchMode=yes") != argv.end());
  CHECK(std::find(argv.begin(), argv.end(), "2222") != argv.end());
  CHECK(std::find(argv.begin(), argv.end(), "/k") != argv.end());
  CHECK(argv[argv.size() - 2] == "a");
  CHECK(argv.back() == "cmd");
}

TEST_CASE("head: forwarded variables: prefixes, then .ddprun_env, then --env", "[head]") {
  const Environment env = {{"NCCL_DEBUG", "INFO"},
                           {"PYTHONPATH", "/p"},
                           {"HOME", "/root"},
                           {"CUDA_HOME", "/c"},
                           {"SET_HERE", "1"},
                           {"UCX_TLS", "tcp"},
                           {"DDPRUN_INTERPRETER", "/venv/bin/python"}};
  LaunchConfig c = parse({"-H", "a", "--env", "SET_HERE", "--env", "NCCL_DEBUG=WARN", "t.py"});
  const EnvList files = parse_env_file("# x\nexport A=1\n  B=2 3\nPYTHONPATH=/q\n\n", "f");
  CHECK(files == EnvList{{"A", "1"}, {"B", "2 3"}, {"PYTHONPATH", "/q"}});
  EnvList got = forwarded_environment(c, env, {{"A", "1"}, {"PYTHONPATH", "/q"}});
  std::sort(got.begin(), got.end());
  CHECK(got == EnvList{{"A", "1"},
                       {"CUDA_HOME", "/c"},
                       {"DDPRUN_INTERPRETER", "/venv/bin/python"},
                       {"NCCL_DEBUG", "WARN"},
                       {"PYTHONPATH", "/q"},
                       {"SET_HERE", "1"},
                       {"UCX_TLS", "tcp"}});
  CHECK_THROWS_WITH(parse_env_file("A=1\nnot a line\n", "f"), Catch::Contains("f line 2"));
  CHECK_THROWS_WITH(parse_env_file("B = 2\n", "f"), Catch::Contains("f line 1"));
  c.env_vars = {"UNSET_HERE"};
  CHECK_THROWS_WITH(forwarded_environment(c, env, {}), Catch::Contains("UNSET_HERE"));
}
