#pragma once
// The job's keys in its store, in one place: what the handlers write and follow, and what
// `ddprun status` (job_status.cpp) reads. Keys are relative to the job's own prefix, which the job
// store adds. "<n>" is a round (elastic) or an attempt (static), "<node>" a node id (elastic) or a
// node rank (static).
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace ddprun::rendezvous::keys {

// Every backend.
inline constexpr std::string_view kSettings = "settings";  // the settings every node agrees on
inline constexpr std::string_view kNodes = "nodes/";       // nodes/<node>: its presence record
inline constexpr std::string_view kClosed = "closed";      // why the job ended, once it has
inline constexpr std::string_view kSecret = "secret";      // the nodes' shared secret
inline constexpr std::string_view kDone = "done/";         // done/<n>/<node>: its workers succeeded
// The round-scoped exchange (exchange_book.hpp): exchange/<scope>/<topic>/<node> and
// flags/<scope>/<topic>.
inline constexpr std::string_view kExchange = "exchange/";
inline constexpr std::string_view kFlags = "flags/";

// The elastic handler.
inline constexpr std::string_view kLeader = "leader";        // the leading node's id
inline constexpr std::string_view kRound = "round";          // the current round
inline constexpr std::string_view kRestarts = "restarts";    // the restarts spent
inline constexpr std::string_view kMaster = "master";        // "<n> host:port": the worker store
inline constexpr std::string_view kInterrupt = "interrupt";  // "<n> why": why the leader ended n
inline constexpr std::string_view kFinished = "finished";    // the last round every node finished
inline constexpr std::string_view kPlace = "place/";         // place/<node>: its placement
inline constexpr std::string_view kRounds = "rounds/";       // rounds/<n>: the round's record
inline constexpr std::string_view kReady = "ready/";  // ready/<n>/<node>: its old workers ended

// The static handler.
inline constexpr std::string_view kAttempt = "attempt";  // the current attempt

// "<prefix><a>", as in nodes/<node> or rounds/<n>.
template <typename A>
std::string key(std::string_view prefix, const A& a) {
  return fmt::format("{}{}", prefix, a);
}
// "<prefix><a>/<b>", as in done/<n>/<node>.
template <typename A, typename B>
std::string key(std::string_view prefix, const A& a, const B& b) {
  return fmt::format("{}{}/{}", prefix, a, b);
}
// "<prefix><a>/", every key of one round or attempt.
template <typename A>
std::string under(std::string_view prefix, const A& a) {
  return fmt::format("{}{}/", prefix, a);
}
// "<n>/<node>", what follows a per-round prefix, as the round and the node. Throws
// std::invalid_argument or std::out_of_range where <n> is not a number.
inline std::pair<int, std::string> round_and_node(std::string_view rest) {
  const auto slash = rest.find('/');
  const std::string node(slash == std::string_view::npos ? "" : rest.substr(slash + 1));
  return {std::stoi(std::string(rest.substr(0, slash))), node};
}
// What follows `prefix` in `k` (which starts with it).
inline std::string_view after(std::string_view k, std::string_view prefix) {
  return k.substr(prefix.size());
}

}  // namespace ddprun::rendezvous::keys
