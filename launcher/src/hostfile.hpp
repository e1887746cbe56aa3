#pragma once
// The hosts of a head-node launch: a hostfile (mpirun's and DeepSpeed's `host slots=N` lines) or
// horovodrun's `-H host1:4,host2:4`, narrowed by DeepSpeed-style --include/--exclude.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

struct HostSlots {
  std::string host;
  std::optional<int> slots;  // workers on that host; nullopt: --nproc_per_node decides

  bool operator==(const HostSlots&) const = default;
};

// Lines `host [slots=N] [max_slots=N]`; `#` starts a comment; blank lines are skipped. Throws
// std::invalid_argument naming `source` and the line for a malformed line, a slot count below 1,
// a host named twice, or no host at all.
std::vector<HostSlots> parse_hostfile(std::string_view text, const std::string& source);

// "host1:4,host2:4,host3" (a host without ':N' has no slot count). Same errors as a hostfile.
std::vector<HostSlots> parse_host_list(std::string_view text);

// The hosts named by `include` ("host1@host2"), or all, less those named by `exclude`, in their
// order. Throws std::invalid_argument for a name that is not among `hosts`, a DeepSpeed slot
// selection (host:0,1, not supported), or when no host is left.
std::vector<HostSlots> select_hosts(const std::vector<HostSlots>& hosts, const std::string& include,
                                    const std::string& exclude);

}  // namespace ddprun::launcher
