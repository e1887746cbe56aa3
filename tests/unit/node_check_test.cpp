// --node_check's judgement (every node against the round's medians) and the probe's report as the
// agent reads it.
#include <catch2/catch.hpp>

#include "exchanges/node_check.hpp"
#include "logs/agent_metrics.hpp"
#include "node/probe_report.hpp"

using namespace ddprun::agent;

namespace {

// Node `rank`: its compute time, and per phase its partner and its all-reduce time.
ProbeReport report(int rank, double compute, std::vector<std::pair<int, double>> links) {
  ProbeReport r;
  r.node_rank = rank;
  r.compute_kind = "cpu";
  r.compute_seconds = compute;
  int phase = 0;
  for (auto [partner, seconds] : links) {
    r.links.push_back(ProbeReport::Link{phase++, partner, seconds, 4 << 20});
  }
  return r;
}

}  // namespace

TEST_CASE("node check: a node whose compute is over the factor times the median is kept out",
          "[node_check]") {
  const std::vector<ProbeReport> reports = {
      report(0, 0.0058, {{1, 0.004}, {3, 0.004}}), report(1, 0.0057, {{0, 0.004}, {2, 0.004}}),
      report(2, 0.0186, {{3, 0.004}, {1, 0.004}}), report(3, 0.0059, {{2, 0.004}, {0, 0.004}})};
  const node_check::Verdict v = node_check::judge(reports, 4, 2.0);
  REQUIRE(v.slow.size() == 1);
  CHECK(v.slow[0].node_rank == 2);
  CHECK(v.slow[0].probe == "compute");
  CHECK(v.slow[0].ratio == Approx(0.0186 / 0.00585));
  CHECK(v.compute_median == Approx(0.00585));
  CHECK(v.kept_out(2) != nullptr);
  CHECK(v.kept_out(0) == nullptr);
  // At a factor above its ratio, nobody.
  CHECK(node_check::judge(reports, 4, 3.5).slow.empty());
}

TEST_CASE("node check: a slow link is the node slow with both partners, not its partners",
          "[node_check]") {
  // Node 3's link is slow: its pairs 2-3 (phase 0) and 3-0 (phase 1) are.
  const std::vector<ProbeReport> reports = {
      report(0, 0.006, {{1, 0.004}, {3, 0.17}}), report(1, 0.006, {{0, 0.004}, {2, 0.005}}),
      report(2, 0.006, {{3, 0.18}, {1, 0.005}}), report(3, 0.006, {{2, 0.18}, {0, 0.17}})};
  const node_check::Verdict v = node_check::judge(reports, 4, 2.0);
  REQUIRE(v.slow.size() == 1);
  CHECK(v.slow[0].node_rank == 3);
  CHECK(v.slow[0].probe == "link");
  CHECK(v.slow[0].ratio > 10);
  CHECK(v.slow[0].detail.find("with nodes 2,0") != std::string::npos);
}

TEST_CASE("node check: with an odd count, the node measured once beside a slow one is not blamed",
          "[node_check]") {
  // Three nodes: 0-1 in phase 0, 1-2 in phase 1; node 1's link is slow.
  const std::vector<ProbeReport> reports = {report(0, 0.006, {{1, 0.2}}),
                                            report(1, 0.006, {{0, 0.2}, {2, 0.21}}),
                                            report(2, 0.006, {{1, 0.21}})};
  const node_check::Verdict v = node_check::judge(reports, 3, 2.0);
  // The median of every measurement is itself slow here: nobody stands out...
  CHECK(v.slow.empty());
  // ...while among more measurements, node 1 does and its single-measured partners do not.
  const std::vector<ProbeReport> five = {
      report(0, 0.006, {{1, 0.2}}), report(1, 0.006, {{0, 0.2}, {2, 0.21}}),
      report(2, 0.006, {{3, 0.004}, {1, 0.21}}), report(3, 0.006, {{2, 0.004}, {4, 0.004}}),
      report(4, 0.006, {{3, 0.004}})};
  const node_check::Verdict w = node_check::judge(five, 5, 2.0);
  REQUIRE(w.slow.size() == 1);
  CHECK(w.slow[0].node_rank == 1);
}

TEST_CASE("node check: two nodes never blame each other's one link", "[node_check]") {
  const node_check::Verdict v =
      node_check::judge({report(0, 0.006, {{1, 0.5}}), report(1, 0.006, {{0, 0.5}})}, 2, 2.0);
  CHECK(v.slow.empty());
  CHECK(v.link_median == Approx(0.5));
}

TEST_CASE("node check: a node without a report, or whose probe failed, gave no answer",
          "[node_check]") {
  const std::vector<ProbeReport> reports = {
      report(0, 0.006, {}), ProbeReport::failure(2, "the probe failed: timed out after 30 s"),
      report(3, 0.006, {})};
  const node_check::Verdict v = node_check::judge(reports, 4, 2.0);
  REQUIRE(v.slow.size() == 2);
  CHECK(v.slow[0].node_rank == 1);
  CHECK(v.slow[0].probe == "no answer");
  CHECK(v.slow[0].detail == "its probe's report did not arrive");
  CHECK(v.slow[1].node_rank == 2);
  CHECK(v.slow[1].detail == "the probe failed: timed out after 30 s");
  // Reports for ranks outside the round change nothing.
  CHECK(node_check::judge({report(7, 1.0, {})}, 1, 2.0).slow.size() == 1);
}

TEST_CASE("node check: a link with a node that gave no answer blames neither end", "[node_check]") {
  // Node 1's probe froze: its partners' links with it never completed. Node 2's only link was
  // with it (three nodes: one sits out each phase).
  ProbeReport zero = report(0, 0.006, {{1, 0.004}, {2, 0.004}});
  zero.links[0].completed = false;
  ProbeReport two = report(2, 0.006, {{1, 0.004}});
  two.links[0].completed = false;
  const node_check::Verdict v = node_check::judge(
      {zero, ProbeReport::failure(1, "the probe failed: timed out after 6 s"), two}, 3, 2.0);
  REQUIRE(v.slow.size() == 1);
  CHECK(v.slow[0].node_rank == 1);
  CHECK_FALSE(v.needs_confirmation());
}

TEST_CASE(
    "node check: a node is kept out only where both measurements found it slow, or it gave no "
    "answer in the first",
    "[node_check]") {
  // The first measurement: node 1's link was slow for a moment, node 2's compute is slow, node 3
  // gave no answer. A suspicion: measured again.
  std::vector<ProbeReport> first_reports = {report(0, 0.006, {{1, 0.004}, {3, 0.004}}),
                                            report(1, 0.006, {{0, 0.0121}, {2, 0.0119}}),
                                            report(2, 0.019, {{3, 0.004}, {1, 0.004}})};
  first_reports.push_back(ProbeReport::failure(3, "the probe failed: timed out after 6 s"));
  const node_check::Verdict first = node_check::judge(first_reports, 4, 2.0);
  REQUIRE(first.slow.size() == 3);
  CHECK(first.needs_confirmation());
  // The second: node 1 is fast now, node 2 still slow, node 3 answers; node 0's link is slow
  // this time only.
  const std::vector<ProbeReport> second_reports = {
      report(0, 0.006, {{1, 0.012}, {3, 0.012}}), report(1, 0.006, {{0, 0.012}, {2, 0.004}}),
      report(2, 0.018, {{3, 0.004}, {1, 0.004}}), report(3, 0.006, {{2, 0.004}, {0, 0.012}})};
  const node_check::Verdict second = node_check::judge(second_reports, 4, 2.0);
  REQUIRE(second.slow.size() == 2);  // nodes 0 (its link) and 2
  const node_check::Verdict v = node_check::confirmed(first, second);
  REQUIRE(v.slow.size() == 2);
  CHECK(v.slow[0].node_rank == 2);
  CHECK(v.slow[0].probe == "compute");
  CHECK(v.slow[0].ratio == Approx(0.018 / 0.006));  // as measured the second time
  CHECK(v.slow[1].node_rank == 3);
  CHECK(v.slow[1].probe == "no answer");
  CHECK(v.kept_out(0) == nullptr);
  CHECK(v.kept_out(1) == nullptr);
  // Nodes that only gave no answer are not measured again: that is final.
  const node_check::Verdict silent =
      node_check::judge({report(0, 0.006, {{1, 0.004}}), report(1, 0.006, {{0, 0.004}})}, 3, 2.0);
  REQUIRE(silent.slow.size() == 1);
  CHECK_FALSE(silent.needs_confirmation());
}

TEST_CASE(
    "node check: a confirmation keeps out no node the first measurement found fast, silent or slow "
    "as it may be",
    "[node_check]") {
  // Five nodes on one loaded host: the first measurement finds node 2's compute slow; the
  // second, three times as long, times out on nodes 0 and 2, and finds node 1's compute slow.
  const node_check::Verdict first =
      node_check::judge({report(0, 0.006, {}), report(1, 0.006, {}), report(2, 0.019, {}),
                         report(3, 0.006, {}), report(4, 0.006, {})},
                        5, 2.0);
  REQUIRE(first.slow.size() == 1);
  const node_check::Verdict second = node_check::judge(
      {ProbeReport::failure(0, "the probe failed: timed out after 6 s"), report(1, 0.02, {}),
       ProbeReport::failure(2, "the probe failed: timed out after 6 s"), report(3, 0.006, {}),
       report(4, 0.006, {})},
      5, 2.0);
  REQUIRE(second.slow.size() == 3);
  const node_check::Verdict v = node_check::confirmed(first, second);
  REQUIRE(v.slow.size() == 1);
  CHECK(v.slow[0].node_rank == 2);  // the suspect, silent when measured again
  CHECK(v.slow[0].probe == "no answer");
  CHECK(v.kept_out(0) == nullptr);
  CHECK(v.kept_out(1) == nullptr);
  CHECK(v.kept_out(3) == nullptr);
}

TEST_CASE("node check: a verdict crosses the exchange as JSON unchanged", "[node_check]") {
  const node_check::Verdict v =
      node_check::judge({report(0, 0.006, {}), report(1, 0.006, {}), report(2, 0.03, {})}, 3, 2.0);
  const std::optional<node_check::Verdict> back =
      node_check::Verdict::from_json(v.to_json().dump());
  REQUIRE(back);
  CHECK(back->nodes == 3);
  CHECK(back->factor == 2.0);
  REQUIRE(back->slow.size() == 1);
  CHECK(back->slow[0].node_rank == 2);
  CHECK(back->slow[0].ratio == Approx(5.0));
  CHECK_FALSE(node_check::Verdict::from_json("{\"nodes\": 3}"));
  CHECK_FALSE(node_check::Verdict::from_json("not json"));
}

TEST_CASE("probe report: the probe's lines parse into one report", "[node_check]") {
  const std::optional<ProbeReport> r =
      ProbeReport::parse("compute cpu 0.0058\nlink 0 1 0.0041 4194304\nlink 1 3 0.0043 4194304\n",
                         2, ProbeReport::Measured::kAll);
  REQUIRE(r);
  CHECK(r->node_rank == 2);
  CHECK(r->compute_kind == "cpu");
  CHECK(r->compute_seconds == Approx(0.0058));
  REQUIRE(r->links.size() == 2);
  CHECK(r->links[1].partner == 3);
  CHECK(r->links[1].bytes == 4194304.0);
  const std::optional<ProbeReport> back = ProbeReport::from_json(r->to_json().dump());
  REQUIRE(back);
  CHECK(back->links.size() == 2);
  CHECK(back->compute_seconds == Approx(0.0058));
}

TEST_CASE("probe report: anything else is refused", "[node_check]") {
  for (const char* text :
       {"", "link 0 1 0.004 100\n", "compute cpu\n", "compute tpu 0.1\n", "compute cpu -1\n",
        "compute cpu nan\n", "compute cpu inf\n", "compute cpu 0.1 extra\n",
        "compute cpu 0.1\nlink 0 -1 0.1 10\n", "compute cpu 0.1\nlink 0 1 0.1\n",
        "compute cpu 0.1\nbogus\n", "compute cpu 0.1\ncompute cpu 0.2\n"}) {
    INFO(text);
    CHECK_FALSE(ProbeReport::parse(text, 0, ProbeReport::Measured::kAll));
  }
  CHECK_FALSE(ProbeReport::from_json("{\"node_rank\": -1}"));
  CHECK_FALSE(ProbeReport::from_json("[]"));
}

TEST_CASE("node check: the metrics name the nodes the last check kept out", "[node_check]") {
  AgentMetrics m(3);
  CHECK(m.render().find("ddprun_node_checks_total 0\n") != std::string::npos);
  m.consume("node_check",
            {{"seconds", 1.25},
             {"slow", {{{"node", "h1_12_ab"}, {"probe", "compute"}, {"ratio", 3.5}}}}});
  const std::string text = m.render();
  CHECK(text.find("ddprun_node_checks_total 1\n") != std::string::npos);
  CHECK(text.find("ddprun_node_check_seconds 1.25\n") != std::string::npos);
  CHECK(text.find("ddprun_node_check_kept_out{node=\"h1_12_ab\",probe=\"compute\"} 3.5\n") !=
        std::string::npos);
  // The next check replaces the last one's list.
  m.consume("node_check", {{"seconds", 0.5}, {"slow", nlohmann::json::array()}});
  CHECK(m.render().find("ddprun_node_check_kept_out") == std::string::npos);
}

TEST_CASE("node check: kernels of one kind are compared, a CPU one never with GPU ones",
          "[node_check]") {
  std::vector<ProbeReport> reports = {report(0, 0.0025, {}), report(1, 0.0026, {}),
                                      report(2, 0.0060, {}), report(3, 0.0024, {})};
  for (ProbeReport& r : reports) r.compute_kind = "gpu";
  reports[2].compute_kind = "cpu";  // its GPU kernel could not run: alone of its kind
  const node_check::Verdict v = node_check::judge(reports, 4, 2.0);
  CHECK(v.slow.empty());
  CHECK(v.compute_median == Approx(0.0025));
  reports.push_back(report(4, 0.0062, {}));  // two more CPU nodes, one three times slower
  reports.push_back(report(5, 0.0190, {}));
  const node_check::Verdict w = node_check::judge(reports, 6, 2.0);
  REQUIRE(w.slow.size() == 1);
  CHECK(w.slow[0].node_rank == 5);
  CHECK(w.slow[0].detail.starts_with("cpu kernel 0.0190 s against the round's median 0.0062 s"));
}

TEST_CASE("node check: a node none of whose links completed is kept out, its partners are not",
          "[node_check]") {
  std::vector<ProbeReport> reports = {
      report(0, 0.006, {{1, 0.004}, {3, 0}}), report(1, 0.006, {{0, 0.004}, {2, 0.005}}),
      report(2, 0.006, {{3, 0}, {1, 0.005}}), report(3, 0.006, {{2, 0}, {0, 0}})};
  for (ProbeReport& r : reports) {
    for (ProbeReport::Link& l : r.links) l.completed = l.partner != 3 && r.node_rank != 3;
  }
  const node_check::Verdict v = node_check::judge(reports, 4, 2.0);
  REQUIRE(v.slow.size() == 1);
  CHECK(v.slow[0].node_rank == 3);
  CHECK(v.slow[0].probe == "link");
  CHECK(v.slow[0].ratio == 0);
  CHECK(v.slow[0].detail ==
        "no all-reduce of 4096 KiB with nodes 2,0 completed in its phase's time");
  const std::optional<ProbeReport> parsed =
      ProbeReport::parse("compute cpu 0.006\nlink 0 2 failed 4194304\nlink 1 0 0.004 4194304\n", 3,
                         ProbeReport::Measured::kAll);
  REQUIRE(parsed);
  CHECK_FALSE(parsed->links[0].completed);
  CHECK(parsed->links[1].completed);
  const std::optional<ProbeReport> back = ProbeReport::from_json(parsed->to_json().dump());
  REQUIRE(back);
  CHECK_FALSE(back->links[0].completed);
  CHECK_FALSE(ProbeReport::parse("compute cpu 0.006\nlink 0 2 failing 4194304\n", 3,
                                 ProbeReport::Measured::kAll));
}

TEST_CASE("probe report: a links-only measurement has no compute line and judges links alone",
          "[node_check]") {
  const auto links = ProbeReport::Measured::kLinks;
  CHECK_FALSE(ProbeReport::parse("compute cpu 0.006\nlink 0 1 0.004 1048576\n", 0, links));
  CHECK_FALSE(ProbeReport::parse("", 0, links));  // a probe that wrote no report
  std::vector<ProbeReport> reports;
  for (const auto& [rank, text] : std::vector<std::pair<int, std::string>>{
           {0, "link 0 1 0.0006 1048576\nlink 1 2 0.0441 1048576\n"},
           {1, "link 0 0 0.0006 1048576\nlink 2 2 0.0440 1048576\n"},
           {2, "link 1 0 0.0441 1048576\nlink 2 1 0.0440 1048576\n"}}) {
    const std::optional<ProbeReport> r = ProbeReport::parse(text, rank, links);
    REQUIRE(r);
    CHECK(r->compute_kind.empty());
    const std::optional<ProbeReport> back = ProbeReport::from_json(r->to_json().dump());
    REQUIRE(back);
    CHECK(back->compute_kind.empty());
    reports.push_back(*back);
  }
  const node_check::Verdict v = node_check::judge(reports, 3, 2.0);
  REQUIRE(v.slow.size() == 1);
  CHECK(v.slow[0].node_rank == 2);
  CHECK(v.slow[0].probe == "link");
  CHECK(v.compute_median == 0);
  // Beside a report with a kernel, reports of links only are no kind of their own.
  reports[0].compute_kind = "cpu";
  reports[0].compute_seconds = 0.006;
  CHECK(node_check::judge(reports, 3, 2.0).compute_median == Approx(0.006));
  nlohmann::json tpu = reports[0].to_json();
  tpu["compute_kind"] = "tpu";
  CHECK_FALSE(ProbeReport::from_json(tpu.dump()));
}
