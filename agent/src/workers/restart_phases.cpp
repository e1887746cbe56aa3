#include "workers/restart_phases.hpp"

#include <algorithm>
#include <chrono>

namespace ddprun::agent {
namespace {

double seconds_between(AttemptTimes::Time from, AttemptTimes::Time to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

}  // namespace

double RestartPhases::total() const {
  return detection + stopping + rendezvous + starting + first_progress.value_or(0.0);
}

nlohmann::json RestartPhases::to_json() const {
  return {{"restart_count", restart_count},
          {"round", round},
          {"cause", cause},
          {"detection_s", detection},
          {"stopping_s", stopping},
          {"rendezvous_s", rendezvous},
          {"starting_s", starting},
          {"first_progress_s", first_progress ? nlohmann::json(*first_progress) : nullptr},
          {"total_s", total()}};
}

void RestartClock::attempt_ended(const AttemptTimes& times, std::string cause) {
  if (!times.ended || !times.stop_began) return;  // no worker ran: the restart goes on
  Pending p;
  p.stop_began = *times.stop_began;
  p.failed = std::min(times.failed.value_or(p.stop_began), p.stop_began);
  p.stopped = std::max(*times.ended, p.stop_began);
  p.cause = std::move(cause);
  pending_ = std::move(p);
}

void RestartClock::round_formed(AttemptTimes::Time now, int round, int restart_count) {
  if (!pending_) return;
  pending_->formed = std::max(now, pending_->stopped);
  pending_->round = round;
  pending_->restart_count = restart_count;
}

std::optional<RestartPhases> RestartClock::complete(const AttemptTimes& times) {
  if (!pending_ || !pending_->formed || !times.started) return std::nullopt;
  const Pending p = std::move(*pending_);
  pending_.reset();
  RestartPhases r;
  r.restart_count = p.restart_count;
  r.round = p.round;
  r.cause = p.cause;
  // Each moment no earlier than the one before, so that every phase is non-negative and they add
  // up to the time from the failure to the first progress.
  const AttemptTimes::Time started = std::max(*times.started, *p.formed);
  r.detection = seconds_between(p.failed, p.stop_began);
  r.stopping = seconds_between(p.stop_began, p.stopped);
  r.rendezvous = seconds_between(p.stopped, *p.formed);
  r.starting = seconds_between(*p.formed, started);
  if (times.first_progress) r.first_progress = seconds_between(started, *times.first_progress);
  return r;
}

}  // namespace ddprun::agent
