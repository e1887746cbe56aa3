#pragma once
// Whether an etcd cluster has a live leader, by what its members say of theirs.
//
// etcd expires leases on its leader only, through the raft log (so only with a majority of the
// members behind it), and a newly elected leader renews every lease for its TTL (plus an election
// timeout) from its election on. So at a moment when a majority of the cluster is without a live
// leader, no lease can run out, and none will within its TTL from then.
#include <string>
#include <vector>

namespace ddprun::rendezvous::etcd {

// What one member said when asked for its status.
struct MemberAnswer {
  enum class Kind { kSilent, kRefused, kAnswered };
  Kind kind = Kind::kSilent;
  std::string member;  // its member ID, where known (always, for an answer)
  std::string leader;  // for an answer: the ID of the leader it follows; empty: none
};

// Whether `answers` (one per member asked) show a majority of a cluster of `cluster_size` members
// without a live leader. A member counts when it refuses connections (its process is gone), answers
// that it has no leader, or names as its leader a member that refuses connections. A silent member
// never counts: it may be this node that is cut off.
bool majority_without_live_leader(const std::vector<MemberAnswer>& answers, size_t cluster_size);

// Whether the answers that `arrived` so far (the others are kSilent in `answers`) settle
// majority_without_live_leader, whatever the members yet to answer say.
bool leadership_settled(const std::vector<MemberAnswer>& answers, const std::vector<bool>& arrived,
                        size_t cluster_size);

}  // namespace ddprun::rendezvous::etcd
