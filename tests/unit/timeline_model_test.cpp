// ddprun timeline's model: what a node's log says becomes spans and marks on the store's clock,
// however the log ends.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "timeline/html_view.hpp"
#include "timeline/job_timeline.hpp"

using namespace ddprun::launcher::timeline;
namespace fs = std::filesystem;

namespace {

std::string write_log(const std::string& name, const std::vector<std::string>& lines) {
  const fs::path path = fs::temp_directory_path() / name;
  std::ofstream out(path);
  for (const std::string& line : lines) out << line << '\n';
  return path.string();
}

std::string line(int64_t ms, const std::string& event, const std::string& rest,
                 const std::string& host = "h", int pid = 7) {
  return "{\"time_ms\":" + std::to_string(ms) + ",\"node\":\"" + host +
         "\",\"agent_pid\":" + std::to_string(pid) + ",\"run_id\":\"j\",\"event\":\"" + event +
         "\"" + (rest.empty() ? "" : "," + rest) + "}";
}

const Span* find(const NodeTimeline& n, const std::string& kind, int track) {
  for (const Span& s : n.spans) {
    if (s.kind == kind && s.track == track) return &s;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("timeline: a log that ends mid-attempt leaves it and its workers unfinished at its end",
          "[timeline]") {
  const std::string log = write_log(
      "ddprun_timeline_cut.jsonl",
      {line(1000, "round_formed",
            "\"round\":0,\"restart_count\":0,\"node_rank\":0,\"world_size\":2"),
       line(1010, "workers_started",
            "\"workers\":[{\"local_rank\":0,\"rank\":0,\"pid\":1},{\"local_rank\":1,\"rank\":1,"
            "\"pid\":2}]"),
       line(1500, "worker_exited", "\"local_rank\":1,\"exitcode\":0,\"stopped_by_ddprun\":false"),
       line(2000, "checkpoint_persisted", "\"rank\":0,\"step\":4")});
  const JobTimeline job = build_timeline(read_event_logs({log}));
  REQUIRE(job.nodes.size() == 1);
  const NodeTimeline& n = job.nodes[0];
  const Span* attempt = find(n, "unfinished", kAgentTrack);
  REQUIRE(attempt != nullptr);
  CHECK(attempt->end_us == 2'000'000);
  CHECK(n.local_ranks == 2);
  int workers_ending_last = 0;
  for (const Span& s : n.spans) workers_ending_last += s.kind == "worker" && s.end_us == 2'000'000;
  CHECK(workers_ending_last == 1);  // rank 1 ended at 1.5 s, rank 0 with the log
  REQUIRE(n.marks.size() == 1);
  CHECK(n.marks[0].name == "checkpoint_persisted");
  CHECK(job.start_us == 1'000'000);
  fs::remove(log);
}

TEST_CASE("timeline: each node's times move by the offset of its quickest round trip",
          "[timeline]") {
  const auto formed = [](int64_t ms, int round, double offset, double rtt) {
    return line(
        ms, "round_formed",
        "\"round\":" + std::to_string(round) + ",\"restart_count\":" + std::to_string(round) +
            ",\"node_rank\":1,\"world_size\":2," + "\"clock_offset_ms\":" + std::to_string(offset) +
            ",\"clock_round_trip_ms\":" + std::to_string(rtt));
  };
  const std::string log =
      write_log("ddprun_timeline_clock.jsonl",
                {formed(10'000, 0, -5000.0, 0.5), formed(11'000, 1, -4990.0, 3.0)});
  const JobTimeline job = build_timeline(read_event_logs({log}));
  REQUIRE(job.nodes.size() == 1);
  REQUIRE(job.nodes[0].clock_offset_ms.has_value());
  CHECK(*job.nodes[0].clock_offset_ms == Approx(-5000.0));
  CHECK(job.start_us == 5'000'000);
  CHECK(job.nodes[0].label == "node 1 · h");
  fs::remove(log);
}

TEST_CASE("timeline: two agents of one host are two nodes, and logs without pids go by file",
          "[timeline]") {
  const std::string a =
      write_log("ddprun_timeline_a.jsonl", {line(1, "agent_started", "", "h", 1)});
  const std::string b =
      write_log("ddprun_timeline_b.jsonl", {line(2, "agent_started", "", "h", 2)});
  CHECK(build_timeline(read_event_logs({a, b})).nodes.size() == 2);
  const std::string old =
      write_log("ddprun_timeline_old.jsonl",
                {"{\"time_ms\":5,\"node\":\"h\",\"run_id\":\"j\",\"event\":\"x\"}"});
  const JobTimeline job = build_timeline(read_event_logs({a, old}));
  REQUIRE(job.nodes.size() == 2);
  CHECK(job.nodes[0].label.find("(agent") != std::string::npos);  // one host, told apart
  for (const auto& f : {a, b, old}) fs::remove(f);
}

TEST_CASE("timeline: a log's text cannot end the page's script", "[timeline]") {
  JobTimeline job;
  job.run_id = "</script><!--";
  NodeTimeline node;
  node.label = "</script><script>alert(1)</script>";
  job.nodes.push_back(node);
  const std::string page = html_view(job);
  size_t closing = 0;
  for (size_t at = page.find("</script"); at != std::string::npos;
       at = page.find("</script", at + 1)) {
    ++closing;
  }
  CHECK(closing == 2);  // the page's own two
  CHECK(page.find("<!--") == std::string::npos);
  CHECK(page.find("\\u003c/script>\\u003cscript>alert(1)") != std::string::npos);
}
