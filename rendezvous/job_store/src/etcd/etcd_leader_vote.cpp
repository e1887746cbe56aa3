#include "etcd_leader_vote.hpp"

#include <algorithm>
#include <set>

namespace ddprun::rendezvous::etcd {

namespace {

// How many of `answers` count as members without a live leader (see majority_without_live_leader).
size_t without_live_leader(const std::vector<MemberAnswer>& answers) {
  std::set<std::string> gone;
  for (const auto& a : answers) {
    if (a.kind == MemberAnswer::Kind::kRefused && !a.member.empty()) gone.insert(a.member);
  }
  size_t without = 0;
  for (const auto& a : answers) {
    switch (a.kind) {
      case MemberAnswer::Kind::kRefused:
        ++without;
        break;
      case MemberAnswer::Kind::kAnswered:
        if (a.leader.empty() || gone.count(a.leader) > 0) ++without;
        break;
      case MemberAnswer::Kind::kSilent:
        break;
    }
  }
  return without;
}

}  // namespace

bool majority_without_live_leader(const std::vector<MemberAnswer>& answers, size_t cluster_size) {
  return without_live_leader(answers) > cluster_size / 2;
}

bool leadership_settled(const std::vector<MemberAnswer>& answers, const std::vector<bool>& arrived,
                        size_t cluster_size) {
  const size_t without = without_live_leader(answers);
  if (without > cluster_size / 2) return true;
  // At most: every member yet to answer refuses, and so does every leader named that did not
  // answer itself.
  std::set<std::string> answering;
  for (const auto& a : answers) {
    if (a.kind == MemberAnswer::Kind::kAnswered) answering.insert(a.member);
  }
  size_t could = without;
  for (size_t i = 0; i < answers.size(); ++i) {
    const MemberAnswer& a = answers[i];
    if (!arrived[i]) {
      ++could;
    } else if (a.kind == MemberAnswer::Kind::kAnswered && !a.leader.empty() &&
               answering.count(a.leader) == 0) {
      ++could;
    }
  }
  return could + (cluster_size - std::min(cluster_size, answers.size())) <= cluster_size / 2;
}

}  // namespace ddprun::rendezvous::etcd
