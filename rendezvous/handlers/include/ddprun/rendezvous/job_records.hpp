#pragma once
// The records stored under the job's keys (src/job_keys.hpp), in one place: how the handlers write
// them and how the handlers and `ddprun status` (job_status.cpp) read them back. Each is a JSON
// object. Readers of a record another node wrote take what they can: a malformed one reads as
// nullopt rather than throwing.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun::rendezvous::records {

// nodes/<node>: a member's presence.
struct Node {
  int nproc = 0;
  std::string host;
  std::optional<int64_t> since_ms;  // when it joined, wall clock
  std::string addr;  // the address it reaches its peers from ("" where it does not say)
};
// {"nproc": N, "host": H, "since_ms": now, "addr": A (where not empty)}.
std::string node_text(int nproc, const std::string& host, const std::string& addr = "");
std::optional<Node> parse_node(std::string_view text);

// settings: the job-wide settings every node must share, as (flag, value) pairs.
std::string settings_text(const std::vector<std::pair<std::string, std::string>>& settings);
// A settings record's (flag, value) pairs by flag; nullopt where it is not an object.
std::optional<std::map<std::string, std::string>> parse_settings(std::string_view text);

// rounds/<n>: an elastic round as its leader decided it: its members in node-rank order, each
// one's workers, and the restarts spent when it began.
struct Round {
  std::vector<std::string> participants;
  std::vector<int> nproc;
  int restarts = 0;
};
std::string round_text(const Round& round);
std::optional<Round> parse_round(std::string_view text);

}  // namespace ddprun::rendezvous::records
