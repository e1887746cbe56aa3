// The command line read by argparse's rules, as torchrun's parser reads it. Each expectation here
// was checked against torch 2.14's torchrun on Python 3.14 (tests/launcher/corpus_test.py runs real
// command lines through both).
#include <catch2/catch.hpp>

#include "agent_config.hpp"
#include "launch_config.hpp"

using namespace ddprun::launcher;

namespace {
LaunchConfig parse(std::vector<std::string> args, ddprun::agent::Environment env = {}) {
  return parse_command_line(args, env);
}

std::string usage_error(std::vector<std::string> args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("argparse: an unambiguous prefix of a long option is that option", "[cli][argparse]") {
  CHECK(parse({"--nnode=2", "--master_port=9", "t.py"}).rdzv.max_nodes == 2);
  CHECK(parse({"--nproc_per=3", "t.py"}).rdzv.nproc == 3);
  CHECK(parse({"--nproc-per", "3", "t.py"}).rdzv.nproc == 3);
  CHECK(parse({"--stand", "t.py"}).standalone);
  CHECK(parse({"--max_r=4", "t.py"}).rdzv.max_restarts == 4);
}

TEST_CASE("argparse: a prefix of several spellings is an error naming them in torchrun's order",
          "[cli][argparse]") {
  CHECK(usage_error({"--nproc=2", "t.py"}) ==
        "ambiguous option: --nproc=2 could match --nproc-per-node, --nproc_per_node");
  CHECK(usage_error({"--max", "1", "t.py"}) ==
        "ambiguous option: --max could match --max-restarts, --max_restarts");
  CHECK(usage_error({"--rdzv", "x", "t.py"}) ==
        "ambiguous option: --rdzv could match --rdzv-backend, --rdzv_backend, --rdzv-endpoint, "
        "--rdzv_endpoint, --rdzv-id, --rdzv_id, --rdzv-conf, --rdzv_conf");
}

TEST_CASE("argparse: a prefix that fits torchrun's option and ddprun's own means torchrun's",
          "[cli][argparse]") {
  // torchrun reads --h as --help and --no_ as --no_python; ddprun's --hostfile, --health_check and
  // --no_slurm do not change that.
  CHECK_THROWS_AS(parse({"--h"}), HelpRequested);
  CHECK_THROWS_AS(parse({"--he", "t.py"}), HelpRequested);
  CHECK(parse({"--no_", "t.py"}).no_python);
  CHECK(parse({"--event_=console", "t.py"}).event_log_handler == EventLogHandler::kConsole);
  // Where only ddprun's own options fit, argparse's rules hold among them.
  CHECK(parse({"--hang_=5", "t.py"}).hang.timeout == std::chrono::seconds(5));
  CHECK(usage_error({"--ssh_=1", "t.py"})
            .starts_with("ambiguous option: --ssh_=1 could match "
                         "--ssh_port, --ssh_identity, --ssh_option"));
}

TEST_CASE("argparse: the last of a repeated option wins, a repeatable one keeps all",
          "[cli][argparse]") {
  const auto c =
      parse({"--role", "a", "--nproc_per_node=2", "--role=b", "--nproc-per-node", "3", "t.py"});
  CHECK(c.role == "b");
  CHECK(c.rdzv.nproc == 3);
  CHECK(parse({"--standalone", "--standalone", "t.py"}).standalone);
  CHECK(parse({"-H", "a:1", "--env", "A", "--env=B", "t.py"}).env_vars ==
        std::vector<std::string>{"A", "B"});
}

TEST_CASE("argparse: one-letter options take attached values and combine", "[cli][argparse]") {
  const auto a = parse({"-t3", "-r", "1", "t.py"});
  CHECK(a.tee.front() == ddprun::agent::Std::kAll);
  CHECK(a.redirects.front() == ddprun::agent::Std::kOut);
  const auto b = parse({"-mt3", "pkg.main"});
  CHECK(b.module);
  CHECK(b.tee.front() == ddprun::agent::Std::kAll);
  CHECK(parse({"-r=2", "t.py"}).redirects.front() == ddprun::agent::Std::kErr);
  CHECK(usage_error({"-m=1", "t.py"}) == "argument -m/--module: ignored explicit argument '1'");
  CHECK(usage_error({"-mx", "t.py"}) == "unrecognized arguments: -x");
}

TEST_CASE("argparse: a value is never an option, and a flag takes none", "[cli][argparse]") {
  CHECK(usage_error({"--role", "--standalone", "t.py"}) ==
        "argument --role: expected one argument");
  CHECK(usage_error({"--role", "--", "t.py"}) == "argument --role: expected one argument");
  CHECK(usage_error({"--role"}) == "argument --role: expected one argument");
  CHECK(usage_error({"--standalone=1", "t.py"}) ==
        "argument --standalone: ignored explicit argument '1'");
  // A negative number or text with a space is a value.
  CHECK(parse({"--role", "-1", "t.py"}).role == "-1");
  CHECK(parse({"--role", "-a b", "t.py"}).role == "-a b");
  CHECK(parse({"--role=", "t.py"}).role.empty());
}

TEST_CASE("argparse: where the script and its arguments begin", "[cli][argparse]") {
  // The first argument that is no option is the script; everything after it is the script's.
  const auto a = parse({"--nproc_per_node=2", "t.py", "--nproc_per_node=9", "-m"});
  CHECK(a.training_script == "t.py");
  CHECK(a.training_script_args == std::vector<std::string>{"--nproc_per_node=9", "-m"});
  // A `--` right after the script is dropped (torchrun -m pkg.train -- --depth=26), once.
  const auto b = parse({"-m", "pkg.train", "--", "--depth=26"});
  CHECK(b.training_script == "pkg.train");
  CHECK(b.training_script_args == std::vector<std::string>{"--depth=26"});
  CHECK(parse({"t.py", "--", "--"}).training_script_args == std::vector<std::string>{"--"});
  // A `--` before the script ends the options; a second one then reaches the script.
  const auto c = parse({"--role=x", "--", "--t.py", "--", "a"});
  CHECK(c.training_script == "--t.py");
  CHECK(c.training_script_args == std::vector<std::string>{"--", "a"});
  CHECK(parse({"-", "a"}).training_script == "-");
  CHECK(usage_error({"--standalone"}) == "the following arguments are required: training_script");
  CHECK(usage_error({"--standalone", "--"}) ==
        "the following arguments are required: training_script");
  // Unrecognized options are named after the whole line is read, all of them.
  CHECK(usage_error({"--foo", "--bar=1", "t.py"}) == "unrecognized arguments: --foo --bar=1");
}

TEST_CASE("argparse: ddprun launch reads torch.distributed.launch's options the same way",
          "[cli][argparse]") {
  const auto c =
      parse_command_line({"--use_e", "--nproc_per=2", "t.py"}, {}, Dialect::kDistributedLaunch);
  CHECK(c.local_rank_argument.empty());
  CHECK(c.rdzv.nproc == 2);
  CHECK_THROWS_WITH(parse_command_line({"--use", "t.py"}, {}, Dialect::kDistributedLaunch),
                    "ambiguous option: --use could match --use-env, --use_env");
}

TEST_CASE("argparse: --run-path takes precedence over --no-python and -m, as in torchrun",
          "[cli][argparse]") {
  const auto c = parse({"--run-path", "--no-python", "-m", "t.py", "a"});
  const auto a = make_agent_config(c, {}, nullptr);
  REQUIRE(a.entrypoint.size() == 4);
  CHECK(a.entrypoint[1] == "-u");
  CHECK(a.entrypoint[2] == "t.py");
  CHECK(a.entrypoint[3] == "a");
  CHECK(make_agent_config(parse({"-m", "pkg.main"}), {}, nullptr).entrypoint[2] == "-m");
  CHECK(make_agent_config(parse({"--no-python", "./bin"}), {}, nullptr).entrypoint ==
        std::vector<std::string>{"./bin"});
}

TEST_CASE("argparse: values torchrun refuses after parsing are RefusedValue (exit 1)",
          "[cli][argparse]") {
  CHECK_THROWS_AS(parse({"--nproc_per_node=abc", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--nproc_per_node=gpu", "t.py"}, {{"CUDA_VISIBLE_DEVICES", ""}}),
                  RefusedValue);
  CHECK_THROWS_AS(parse({"--nnodes=2:1", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--nnodes=1:2:3", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--rdzv_endpoint=localhost", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--no_python", "-m", "t.py"}), RefusedValue);
  // Text (or an integer) to argparse, refused once torchrun builds the launch from it.
  CHECK_THROWS_AS(parse({"--rdzv_backend=foo", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--rdzv_backend=c10d", "--rdzv_endpoint=h:x", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--rdzv_conf=join_timeout=x", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--rdzv_conf=is_host=maybe", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--master_port=70000", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--signals_to_handle=SIGFOO", "t.py"}), RefusedValue);
  // argparse's own: no integer at all.
  CHECK_THROWS_AS(parse({"--master_port=x", "t.py"}), UsageError);
  try {
    parse({"--master_port=x", "t.py"});
  } catch (const RefusedValue&) {
    FAIL("--master_port=x is argparse's error (exit 2)");
  } catch (const UsageError&) {
  }
}

TEST_CASE("argparse: rdzv_conf values torch refuses are refused, not ignored", "[cli][argparse]") {
  // A heartbeat of zero would declare every node lost at once.
  CHECK_THROWS_AS(parse({"--rdzv_conf=keep_alive_interval=0", "t.py"}), RefusedValue);
  CHECK(parse({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1",
               "--rdzv_conf=keep_alive_interval=2,keep_alive_max_attempt=2", "t.py"})
            .rdzv.heartbeat_timeout == std::chrono::seconds(4));
  // torch's FileStore rendezvous is not one ddprun has; tcp is what it does.
  CHECK_THROWS_AS(parse({"--rdzv_conf=store_type=file", "t.py"}), RefusedValue);
  CHECK_THROWS_AS(parse({"--rdzv_conf=store_type=bogus", "t.py"}), RefusedValue);
  CHECK_NOTHROW(parse({"--rdzv_conf=store_type=tcp", "t.py"}));
  CHECK_NOTHROW(parse({"--rdzv_conf=store_type= TCP", "t.py"}));  // as torch strips and lowers it
}

TEST_CASE("argparse: the internal --head_control has no PET_ fallback", "[cli][argparse]") {
  CHECK_FALSE(parse({"t.py"}, {{"PET_HEAD_CONTROL", "1"}}).head_control);
  CHECK(parse({"--head_control", "t.py"}).head_control);
}

TEST_CASE("argparse: the static backend takes its master from --rdzv_endpoint when given",
          "[cli][argparse]") {
  const auto one = parse({"--nnodes=1", "--rdzv_id=101", "--rdzv_endpoint=localhost:5972", "t.py"});
  CHECK(one.rdzv.backend == ddprun::rendezvous::Backend::kStatic);
  CHECK(one.rdzv.master_addr == "localhost");
  CHECK(one.rdzv.store_port == 5972);
  CHECK(one.rdzv.run_id == "101");
  const auto two = parse({"--nnodes=2", "--node_rank=1", "--master_addr=a", "--master_port=1",
                          "--rdzv_endpoint=head:29411", "t.py"});
  CHECK(two.rdzv.master_addr == "head");
  CHECK(two.rdzv.endpoint_host == "head");
  CHECK(two.rdzv.store_port == 29411);
}

TEST_CASE("argparse: an option that does nothing without another is named, not ignored silently",
          "[cli][argparse]") {
  CHECK(idle_options(parse({"t.py"})).empty());
  CHECK(idle_options(parse({"--health_check_timeout=5", "--node_check_factor=3",
                            "--checkpoint_persist_every=4", "--metrics_addr=::1",
                            "--straggler_threshold=0", "--straggler_steps=3", "t.py"})) ==
        std::vector<std::string>{
            "--health_check_timeout has no effect without --health_check",
            "--node_check_factor has no effect without --node_check",
            "--checkpoint_persist_every has no effect without --checkpoint_dir",
            "--metrics_addr has no effect without --metrics_port",
            "--straggler_steps has no effect without a --straggler_threshold above 0"});
  CHECK(idle_options(parse({"--straggler_action=replace", "t.py"})) ==
        std::vector<std::string>{"--straggler_action has no effect in a job of one node: the "
                                 "straggler check compares nodes"});
  CHECK(idle_options(parse({"--health_check=true", "--health_check_timeout=5",
                            "--checkpoint_dir=/ck", "--checkpoint_persist_every=4", "--nnodes=2",
                            "--master_addr=a", "--straggler_action=replace", "t.py"}))
            .empty());
}

TEST_CASE("argparse: a head-node launch refuses an --nproc_per_node no host could count",
          "[cli][argparse]") {
  CHECK_THROWS_AS(parse({"-H", "a,b", "--nproc_per_node=x", "t.py"}), RefusedValue);
  CHECK_NOTHROW(parse({"-H", "a,b", "--nproc_per_node=gpu", "t.py"}));
  CHECK(parse({"-H", "a,b", "--nproc_per_node=3", "t.py"}).rdzv.nproc == 3);
}

TEST_CASE("argparse: one node runs alone unless its command line names a store to meet on",
          "[cli][argparse]") {
  CHECK(parse({"t.py"}).rdzv.alone());
  CHECK(parse({"--standalone", "t.py"}).rdzv.alone());
  CHECK(parse({"--master_port=29511", "t.py"}).rdzv.alone());  // static, one node
  CHECK(parse({"--rdzv_backend=c10d", "t.py"}).rdzv.alone());
  CHECK(parse({"--rdzv_backend=c10d", "--rdzv_endpoint=h:0", "t.py"}).rdzv.alone());
  CHECK_FALSE(parse({"--rdzv_backend=c10d", "--rdzv_endpoint=h:29400", "t.py"}).rdzv.alone());
  CHECK_FALSE(parse({"--rdzv_backend=etcd-v2", "--rdzv_endpoint=h:2379", "t.py"}).rdzv.alone());
  CHECK_FALSE(parse({"--nnodes=2", "--master_addr=a", "t.py"}).rdzv.alone());
  CHECK_FALSE(
      parse({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1", "t.py"}).rdzv.alone());
}
