// Restart phases: the moments of the attempt that ended and of the next one, turned into phases
// that follow one another; and the histogram they are exported as.
#include <catch2/catch.hpp>

#include "logs/seconds_histogram.hpp"
#include "workers/restart_phases.hpp"

using namespace ddprun::agent;
using std::chrono::milliseconds;

namespace {

const AttemptTimes::Time t0{std::chrono::seconds(100)};

AttemptTimes ended_attempt(int failed, int stop_began, int ended) {
  AttemptTimes t;
  t.started = t0;
  t.failed = t0 + milliseconds(failed);
  t.stop_began = t0 + milliseconds(stop_began);
  t.ended = t0 + milliseconds(ended);
  return t;
}

AttemptTimes new_attempt(int started, std::optional<int> progress) {
  AttemptTimes t;
  t.started = t0 + milliseconds(started);
  if (progress) t.first_progress = t0 + milliseconds(*progress);
  return t;
}

}  // namespace

TEST_CASE("restart phases follow one another from the failure to the first progress", "[restart]") {
  RestartClock clock;
  clock.attempt_ended(ended_attempt(1000, 3000, 3200), "hang");
  clock.round_formed(t0 + milliseconds(3250), 1, 1);
  const std::optional<RestartPhases> p = clock.complete(new_attempt(3300, 3700));
  REQUIRE(p);
  CHECK(p->cause == "hang");
  CHECK(p->round == 1);
  CHECK(p->restart_count == 1);
  CHECK(p->detection == Approx(2.0));
  CHECK(p->stopping == Approx(0.2));
  CHECK(p->rendezvous == Approx(0.05));
  CHECK(p->starting == Approx(0.05));
  CHECK(*p->first_progress == Approx(0.4));
  CHECK(p->total() == Approx(2.7));
  const nlohmann::json j = p->to_json();
  CHECK(j["total_s"].get<double>() == Approx(2.7));
  CHECK(j["cause"] == "hang");
  // Once: the same restart is not measured again at the attempt's end.
  CHECK_FALSE(clock.complete(new_attempt(3300, 3700)));
}

TEST_CASE("restart phases: an attempt that ends before any progress ends the restart without it",
          "[restart]") {
  RestartClock clock;
  clock.attempt_ended(ended_attempt(500, 500, 520), "failure");
  clock.round_formed(t0 + milliseconds(530), 1, 1);
  const std::optional<RestartPhases> p = clock.complete(new_attempt(540, std::nullopt));
  REQUIRE(p);
  CHECK_FALSE(p->first_progress);
  CHECK(p->total() == Approx(0.04));
  CHECK(p->to_json()["first_progress_s"].is_null());
}

TEST_CASE("restart phases: nothing is measured before a restart, or before its round formed",
          "[restart]") {
  RestartClock clock;
  CHECK_FALSE(clock.complete(new_attempt(0, 10)));  // the first attempt is no restart
  clock.attempt_ended(ended_attempt(500, 500, 520), "failure");
  CHECK_FALSE(clock.complete(new_attempt(540, 600)));  // no round formed yet
}

TEST_CASE("restart phases: a round that ended before its workers started continues the restart",
          "[restart]") {
  RestartClock clock;
  clock.attempt_ended(ended_attempt(500, 500, 600), "interrupted");
  clock.round_formed(t0 + milliseconds(700), 1, 1);
  clock.attempt_ended(AttemptTimes{}, "interrupted");  // round 1 ran no worker
  clock.round_formed(t0 + milliseconds(900), 2, 1);
  const std::optional<RestartPhases> p = clock.complete(new_attempt(950, 1000));
  REQUIRE(p);
  CHECK(p->round == 2);
  CHECK(p->rendezvous == Approx(0.3));
  CHECK(p->total() == Approx(0.5));
}

TEST_CASE("restart phases are never negative, whatever order the clock readings came in",
          "[restart]") {
  RestartClock clock;
  // A hang's failure time after its detection, an end before the stop, a start before the round.
  clock.attempt_ended(ended_attempt(900, 800, 700), "hang");
  clock.round_formed(t0 + milliseconds(650), 1, 1);
  const std::optional<RestartPhases> p = clock.complete(new_attempt(600, 550));
  REQUIRE(p);
  for (double phase : {p->detection, p->stopping, p->rendezvous, p->starting, *p->first_progress}) {
    CHECK(phase >= 0);
  }
  CHECK(p->total() == Approx(0.0));
}

TEST_CASE("a seconds histogram counts each observation in every bucket at or above it",
          "[metrics]") {
  SecondsHistogram h;
  h.observe(0.003);
  h.observe(2.0);
  h.observe(1000);
  const std::string text = h.render("x_seconds", "How long.", "phase=\"total\"");
  CHECK(text.starts_with("# HELP x_seconds How long.\n# TYPE x_seconds histogram\n"));
  CHECK(text.find("x_seconds_bucket{phase=\"total\",le=\"0.001\"} 0\n") != std::string::npos);
  CHECK(text.find("x_seconds_bucket{phase=\"total\",le=\"0.005\"} 1\n") != std::string::npos);
  CHECK(text.find("x_seconds_bucket{phase=\"total\",le=\"2.5\"} 2\n") != std::string::npos);
  CHECK(text.find("x_seconds_bucket{phase=\"total\",le=\"300\"} 2\n") != std::string::npos);
  CHECK(text.find("x_seconds_bucket{phase=\"total\",le=\"+Inf\"} 3\n") != std::string::npos);
  CHECK(text.find("x_seconds_count{phase=\"total\"} 3\n") != std::string::npos);
  CHECK(text.find("x_seconds_sum{phase=\"total\"} 1002.003\n") != std::string::npos);
  CHECK(h.render("x_seconds", "", "").starts_with("x_seconds_bucket{le=\"0.001\"} 0\n"));
}
