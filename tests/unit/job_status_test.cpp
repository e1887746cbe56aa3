// `ddprun status`'s reading of a job's keys, for the layouts both kinds of handler write.
#include <catch2/catch.hpp>

#include "ddprun/rendezvous/job_status.hpp"

using namespace ddprun::rendezvous;
using Keys = std::vector<std::pair<std::string, std::string>>;

TEST_CASE("job status: an elastic job's round, spares, gone nodes and failures", "[status]") {
  const Keys keys = {
      {"settings", R"({"--nnodes":"1:3","--max_restarts":"2"})"},
      {"nodes/a", R"({"nproc":2,"host":"h-a","since_ms":1000})"},
      {"nodes/c", R"({"nproc":4,"host":"h-c","since_ms":3000})"},
      {"round", "2"},
      {"restarts", "1"},
      {"rounds/0", R"({"participants":["a","b"],"nproc":[2,3],"restarts":0})"},
      {"rounds/1", R"({"participants":["b","a"],"nproc":[3,2],"restarts":1})"},
      {"exchange/restart/0/failures/b", "[]"},
      {"exchange/round/1/hang_frames/b", "not a failure"},
      {"leader", "c"},
      {"place/a", R"({"round":1,"node_rank":1})"},
  };
  const JobStatus s = interpret_job_keys(Backend::kC10d, keys);
  CHECK(s.leader == "c");
  CHECK(s.leader_host == "h-c");
  CHECK(s.found);
  CHECK(s.round == 1);
  CHECK(s.forming);  // the counter is at 2: a round is being formed
  CHECK(s.world_size == 5);
  CHECK(s.restarts == 1);
  CHECK(s.max_restarts == 2);
  CHECK(s.nnodes == "1:3");
  REQUIRE(s.nodes.size() == 2);
  CHECK(s.nodes[0].id == "b");
  CHECK_FALSE(s.nodes[0].present);  // b's presence is gone
  CHECK(s.nodes[0].first_rank == 0);
  CHECK(s.nodes[0].last_rank == 2);
  CHECK(s.nodes[1].host == "h-a");
  CHECK(s.nodes[1].first_rank == 3);
  CHECK(s.nodes[1].since_ms == 1000);
  REQUIRE(s.spares.size() == 1);
  CHECK(s.spares[0].host == "h-c");
  CHECK(s.last_failures == std::vector<std::string>{"[]"});
  CHECK_FALSE(s.closed);
}

TEST_CASE("job status: a static job and a spent budget", "[status]") {
  const Keys keys = {{"settings", R"({"--nnodes":"2","--max_restarts":"1"})"},
                     {"nodes/1", R"({"nproc":3,"host":"n1"})"},
                     {"nodes/0", R"({"nproc":2,"host":"n0"})"},
                     {"attempt", "2"},
                     {"exchange/restart/1/failures/0", "x"},
                     {"exchange/restart/0/failures/1", "y"},
                     {"closed", "failed"}};
  const JobStatus s = interpret_job_keys(Backend::kStatic, keys);
  CHECK(s.round == 2);
  CHECK(s.restarts == 1);  // the failure past the budget does not count as a restart
  CHECK(s.world_size == 5);
  REQUIRE(s.nodes.size() == 2);
  CHECK(s.nodes[0].host == "n0");
  CHECK(s.nodes[1].first_rank == 2);
  CHECK(s.last_failures == std::vector<std::string>{"x"});
  CHECK(s.closed);
  CHECK(s.closed_reason == "failed");
  CHECK_FALSE(interpret_job_keys(Backend::kC10d, {}).found);
}

TEST_CASE("job status: each node's last restart, and the newest node check's verdict", "[status]") {
  const Keys keys = {
      {"nodes/0", R"({"nproc":1,"host":"n0"})"},
      {"nodes/1", R"({"nproc":1,"host":"n1"})"},
      {"attempt", "1"},
      {"exchange/job/restart/1", R"({"restart_count":1,"total_s":0.5})"},
      {"exchange/job/node_check/0", R"({"round":3,"slow":[]})"},
      {"exchange/job/node_check/1", R"({"round":1,"slow":[{"node_rank":2}]})"},
      {"exchange/job/node_check/2", "not json"},
  };
  const JobStatus s = interpret_job_keys(Backend::kStatic, keys);
  REQUIRE(s.nodes.size() == 2);
  CHECK(s.nodes[0].last_restart.empty());
  CHECK(s.nodes[1].last_restart == R"({"restart_count":1,"total_s":0.5})");
  CHECK(s.node_check == R"({"round":3,"slow":[]})");
}

TEST_CASE("job status: the newest straggler verdict", "[status]") {
  const Keys keys = {
      {"nodes/0", R"({"nproc":1,"host":"n0"})"},
      {"exchange/job/straggler/0", R"({"round":2,"node_rank":1,"action":"replace"})"},
      {"exchange/job/straggler/1", R"({"round":0,"node_rank":0})"},
      {"exchange/job/straggler/2", "not json"},
  };
  const JobStatus s = interpret_job_keys(Backend::kStatic, keys);
  CHECK(s.straggler == R"({"round":2,"node_rank":1,"action":"replace"})");
  CHECK(interpret_job_keys(Backend::kStatic, {{"nodes/0", "{}"}}).straggler.empty());
}
