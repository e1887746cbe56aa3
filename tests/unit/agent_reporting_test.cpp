// The agent's pure pieces: the worker environment, error files, the failure summary.
#include <csignal>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "ddprun/agent/error_file.hpp"
#include "ddprun/agent/failure_json.hpp"
#include "ddprun/agent/failure_summary.hpp"
#include "workers/worker_env.hpp"

using namespace ddprun::agent;

TEST_CASE("worker env: torchrun's contract over the agent's environment", "[agent]") {
  AttemptEnvironment attempt;
  attempt.master_addr = "127.0.0.1";
  attempt.master_port = 29500;
  attempt.restart_count = 1;
  attempt.max_restarts = 3;
  const WorkerIdentity id{1, 1, 2, 2, 0, 1, 1, 2};
  const auto env =
      worker_environment({{"PATH", "/bin"}, {"RANK", "stale"}}, attempt, id, "/e.json");
  const Environment expected_subset = {{"PATH", "/bin"},
                                       {"RANK", "1"},
                                       {"LOCAL_RANK", "1"},
                                       {"WORLD_SIZE", "2"},
                                       {"LOCAL_WORLD_SIZE", "2"},
                                       {"GROUP_RANK", "0"},
                                       {"GROUP_WORLD_SIZE", "1"},
                                       {"ROLE_RANK", "1"},
                                       {"ROLE_NAME", "default"},
                                       {"ROLE_WORLD_SIZE", "2"},
                                       {"MASTER_ADDR", "127.0.0.1"},
                                       {"MASTER_PORT", "29500"},
                                       {"TORCHELASTIC_RESTART_COUNT", "1"},
                                       {"TORCHELASTIC_MAX_RESTARTS", "3"},
                                       {"TORCHELASTIC_RUN_ID", "none"},
                                       {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                       {"TORCHELASTIC_ERROR_FILE", "/e.json"},
                                       {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}};
  for (const auto& [k, v] : expected_subset) {
    INFO(k);
    CHECK(env.at(k) == v);
  }
  CHECK_FALSE(env.contains("CUDA_VISIBLE_DEVICES"));
}

TEST_CASE("worker env: torch 1.13's NCCL_ASYNC_ERROR_HANDLING is passed on, never added",
          "[agent]") {
  const WorkerIdentity id{0, 0, 1, 1, 0, 0, 0, 1};
  CHECK_FALSE(
      worker_environment({}, AttemptEnvironment{}, id, "").contains("NCCL_ASYNC_ERROR_HANDLING"));
  const auto env = worker_environment(
      {{"NCCL_ASYNC_ERROR_HANDLING", "0"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}},
      AttemptEnvironment{}, id, "");
  CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");
}

TEST_CASE("worker env: virtual local rank gives each worker one device as local rank 0",
          "[agent]") {
  AttemptEnvironment attempt;
  attempt.virtual_local_rank = true;
  attempt.checkpoint_slots = 4;
  const WorkerIdentity id{2, 2, 4, 4, 0, 1, 2, 4};
  auto env = worker_environment({{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}}, attempt, id, "");
  CHECK(env.at("LOCAL_RANK") == "0");
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "6");
  // Its checkpoint region is still its own local rank's, of the agent's four.
  CHECK(env.at("DDPRUN_CHECKPOINT_SLOT") == "2");
  CHECK(env.at("DDPRUN_CHECKPOINT_SLOTS") == "4");
  env = worker_environment({}, attempt, id, "");
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "2");
  // Set and empty (the user hid every GPU): local rank 0 sees none, as under torchrun.
  const WorkerIdentity first{0, 0, 1, 1, 0, 1, 0, 1};
  attempt.checkpoint_slots = 1;
  env = worker_environment({{"CUDA_VISIBLE_DEVICES", ""}}, attempt, first, "");
  CHECK(env.at("CUDA_VISIBLE_DEVICES").empty());
}

TEST_CASE("error file: torch's @record format and the older flat one are read", "[agent]") {
  const auto dir = std::filesystem::temp_directory_path() / "ddprun_error_file_test";
  std::filesystem::create_directories(dir);
  const auto nested = (dir / "nested.json").string();
  std::ofstream(nested) << R"({"message": {"message": "ValueError: bad lr", "extraInfo": )"
                        << R"({"py_callstack": "Traceback...", "timestamp": "1700000000"}}})";
  auto r = read_error_file(nested);
  REQUIRE(r);
  CHECK(r->message == "ValueError: bad lr");
  CHECK(r->traceback == "Traceback...");
  CHECK(r->timestamp == 1700000000);
  const auto flat = (dir / "flat.json").string();
  std::ofstream(flat) << R"({"message": "boom", "timestamp": 12})";
  r = read_error_file(flat);
  REQUIRE(r);
  CHECK(r->message == "boom");
  const auto junk = (dir / "junk.json").string();
  std::ofstream(junk) << "not json";
  r = read_error_file(junk);
  REQUIRE(r);
  CHECK_THAT(r->message, Catch::Contains("unreadable"));
  CHECK_FALSE(read_error_file((dir / "missing.json").string()));
  std::filesystem::remove_all(dir);
}

TEST_CASE("summary: the earliest failure is the root cause, at sub-second precision", "[agent]") {
  const auto t0 = std::chrono::system_clock::now();
  WorkerFailure late{3,     3,     300, 1, t0 + std::chrono::milliseconds(400), "", std::nullopt,
                     false, false, ""};
  WorkerFailure early{1,
                      1,
                      100,
                      7,
                      t0 + std::chrono::milliseconds(100),
                      "/x/error.json",
                      ErrorRecord{"RuntimeError: nan loss", "", std::nullopt, std::nullopt},
                      false,
                      false,
                      ""};
  const std::string s = format_failure_summary("train.py", "node7", {late, early});
  const auto root = s.find("Root Cause (first observed failure):");
  REQUIRE(root != std::string::npos);
  CHECK(s.find("train.py FAILED") != std::string::npos);
  CHECK(s.find("rank      : 1 (local_rank: 1)", root) != std::string::npos);
  CHECK(s.find("exitcode  : 7 (pid: 100)", root) != std::string::npos);
  CHECK(s.find("error_file: /x/error.json", root) != std::string::npos);
  CHECK(s.find("traceback : RuntimeError: nan loss", root) != std::string::npos);
  CHECK(s.find("rank      : 3 (local_rank: 3)") < root);
  CHECK(s.find("host      : node7") != std::string::npos);
}

TEST_CASE("summary: a signal death is named, and a SIGKILL ddprun did not send hints at OOM",
          "[agent]") {
  WorkerFailure f;
  f.pid = 42;
  f.exitcode = -SIGKILL;
  CHECK_THAT(describe_failure(f), Catch::Contains("Signal 9 (SIGKILL) received by PID 42") &&
                                      Catch::Contains("out-of-memory"));
  f.sigkill_sent_by_ddprun = true;
  CHECK_THAT(describe_failure(f), !Catch::Contains("out-of-memory"));
  f.exitcode = -SIGSEGV;
  CHECK_THAT(describe_failure(f), Catch::Contains("Signal 11 (SIGSEGV)"));
}

TEST_CASE("worker env: what differs between workers or rounds is per worker, the rest shared",
          "[agent]") {
  AttemptEnvironment a, b;
  a.master_addr = "10.0.0.1";
  a.master_port = 1;
  b.master_addr = "10.0.0.2";
  b.master_port = 2;
  b.restart_count = 3;
  b.run_id = "other";
  b.use_agent_store = false;
  b.role = "trainer";
  const Environment node = {{"PATH", "/bin"}, {"OMP_NUM_THREADS", "1"}};
  const auto first = worker_environment(node, a, WorkerIdentity{0, 0, 2, 2, 0, 1, 0, 2}, "/a");
  const auto other = worker_environment(node, b, WorkerIdentity{1, 5, 8, 2, 2, 4, 5, 8}, "/b");
  for (const auto& [name, value] : first) {
    INFO(name);
    if (other.at(name) != value) CHECK(is_per_worker_variable(name));
  }
  CHECK(shared_part(first) == shared_part(other));
  CHECK(shared_part(first).at("OMP_NUM_THREADS") == "1");
  CHECK_FALSE(shared_part(first).contains("RANK"));
  CHECK(is_per_worker_variable("DDPRUN_HEARTBEAT_FILE"));
  CHECK_FALSE(is_per_worker_variable("PYTHONPATH"));
}

TEST_CASE(
    "failure reports: a worker's text that is not UTF-8 crosses to the other nodes, its bad "
    "bytes replaced",
    "[report]") {
  ddprun::agent::WorkerFailure f;
  f.rank = 3;
  f.exitcode = 1;
  f.error =
      ddprun::agent::ErrorRecord{"ValueError: caf\xe9 au lait", "Traceback\n\xff\xfe", {}, {}};
  std::string text;
  REQUIRE_NOTHROW(text = ddprun::agent::failures_to_json({f}));
  const auto back = ddprun::agent::failures_from_json(text);
  REQUIRE(back.size() == 1);
  CHECK(back[0].rank == 3);
  REQUIRE(back[0].error);
  CHECK(back[0].error->message == "ValueError: caf\xef\xbf\xbd au lait");
}
