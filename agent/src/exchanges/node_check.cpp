#include "exchanges/node_check.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace ddprun::agent::node_check {
namespace {

constexpr const char* kReports = "node_check_reports";
constexpr const char* kVerdict = "node_check_verdict";
constexpr const char* kPassed = "node_check_passed";
constexpr const char* kNoAnswer = "no answer";

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

}  // namespace

const SlowNode* Verdict::kept_out(int node_rank) const {
  for (const SlowNode& s : slow) {
    if (s.node_rank == node_rank) return &s;
  }
  return nullptr;
}

bool Verdict::needs_confirmation() const {
  return std::any_of(slow.begin(), slow.end(),
                     [](const SlowNode& s) { return s.probe != kNoAnswer; });
}

nlohmann::json Verdict::to_json() const {
  nlohmann::json slow_json = nlohmann::json::array();
  for (const SlowNode& s : slow) {
    slow_json.push_back(
        {{"node_rank", s.node_rank}, {"probe", s.probe}, {"ratio", s.ratio}, {"detail", s.detail}});
  }
  return {{"nodes", nodes},
          {"factor", factor},
          {"compute_median_s", compute_median},
          {"link_median_s", link_median},
          {"slow", std::move(slow_json)}};
}

std::optional<Verdict> Verdict::from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    Verdict v;
    v.nodes = j.at("nodes").get<int>();
    v.factor = j.at("factor").get<double>();
    v.compute_median = j.at("compute_median_s").get<double>();
    v.link_median = j.at("link_median_s").get<double>();
    for (const auto& s : j.at("slow")) {
      v.slow.push_back(SlowNode{s.at("node_rank").get<int>(), s.at("probe").get<std::string>(),
                                s.at("ratio").get<double>(), s.at("detail").get<std::string>()});
    }
    return v;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

namespace {

// The round's reports, sorted out for a verdict.
struct Measured {
  std::map<int, const ProbeReport*> answered;  // node rank -> its report
  std::map<int, std::string> failed;           // node rank -> why its probe failed
  // A node's links with nodes that answered: a link with a node that gave no answer says nothing
  // of either end (that node is out already).
  std::map<int, std::vector<ProbeReport::Link>> links;
  // A node's link is its fastest completed measurement: a healthy node is fast with at least one
  // partner.
  std::map<int, double> fastest;
  // The round's median compute time per kernel kind (a GPU node whose GPU kernel could not run ran
  // the CPU one: kernels of one kind are compared).
  std::map<std::string, double> compute_median;
};

Measured measure(const std::vector<ProbeReport>& reports, int nodes, Verdict& v) {
  Measured m;
  for (const ProbeReport& r : reports) {
    if (r.node_rank < 0 || r.node_rank >= nodes) continue;
    if (r.failed.empty()) {
      m.answered.emplace(r.node_rank, &r);
    } else {
      m.failed.emplace(r.node_rank, r.failed);
    }
  }
  for (const auto& [rank, r] : m.answered) {
    for (const auto& l : r->links) {
      if (m.answered.contains(l.partner)) m.links[rank].push_back(l);
    }
  }
  std::map<std::string, std::vector<double>> computes;
  for (const auto& [rank, r] : m.answered) {
    if (!r->compute_kind.empty()) computes[r->compute_kind].push_back(r->compute_seconds);
    for (const auto& l : m.links[rank]) {
      if (!l.completed) continue;
      const auto [it, first] = m.fastest.emplace(rank, l.seconds);
      if (!first) it->second = std::min(it->second, l.seconds);
    }
  }
  std::vector<double> links;
  for (const auto& [rank, seconds] : m.fastest) links.push_back(seconds);
  size_t most = 0;
  for (const auto& [kind, seconds] : computes) {
    m.compute_median[kind] = median(seconds);
    if (seconds.size() > most) {  // the verdict shows the most common kind's
      most = seconds.size();
      v.compute_median = m.compute_median[kind];
    }
  }
  v.link_median = median(links);
  return m;
}

// Nodes whose compute took more than `factor` times their kind's median.
void judge_computes(const Measured& m, double factor, std::map<int, SlowNode>& slow) {
  for (const auto& [rank, r] : m.answered) {
    if (r->compute_kind.empty()) continue;  // its links only measured
    const double typical = m.compute_median.at(r->compute_kind);
    if (typical <= 0) continue;
    const double ratio = r->compute_seconds / typical;
    if (ratio > factor) {
      slow[rank] = SlowNode{rank, "compute", ratio,
                            fmt::format("{} kernel {:.4f} s against the round's median {:.4f} s",
                                        r->compute_kind, r->compute_seconds, typical)};
    }
  }
}

// Links: first the nodes slow with two partners or more, then those measured once, unless their
// one partner is such a node. A node none of whose links completed is slow in its link too
// (ratio 0: beyond measure).
void judge_links(const Measured& m, const Verdict& v, std::map<int, SlowNode>& slow) {
  std::set<int> slow_with_several;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [rank, r] : m.answered) {
      const auto judged = m.links.find(rank);
      if (judged == m.links.end() || judged->second.empty() || slow.contains(rank)) continue;
      const std::vector<ProbeReport::Link>& links = judged->second;
      const bool several = links.size() > 1;
      if (several != (pass == 0)) continue;
      const auto best = m.fastest.find(rank);
      const bool completed = best != m.fastest.end();
      const double ratio = completed && v.link_median > 0 ? best->second / v.link_median : 0;
      if (completed && ratio <= v.factor) continue;
      if (!several && slow_with_several.contains(links.front().partner)) continue;
      if (several) slow_with_several.insert(rank);
      std::vector<int> partners;
      for (const auto& l : links) partners.push_back(l.partner);
      const std::string with =
          fmt::format("{:.0f} KiB with node{} {}", links.front().bytes / 1024,
                      partners.size() > 1 ? "s" : "", fmt::join(partners, ","));
      slow[rank] = SlowNode{
          rank, "link", ratio,
          completed ? fmt::format("all-reduce of {} in {:.4f} s at best, against the round's "
                                  "median {:.4f} s",
                                  with, best->second, v.link_median)
                    : fmt::format("no all-reduce of {} completed in its phase's time", with)};
    }
  }
}

}  // namespace

Verdict judge(const std::vector<ProbeReport>& reports, int nodes, double factor) {
  Verdict v;
  v.nodes = nodes;
  v.factor = factor;
  const Measured m = measure(reports, nodes, v);
  std::map<int, SlowNode> slow;
  for (int rank = 0; rank < nodes; ++rank) {
    if (m.answered.contains(rank)) continue;
    const auto f = m.failed.find(rank);
    slow[rank] = SlowNode{rank, kNoAnswer, 0,
                          f != m.failed.end() ? f->second : "its probe's report did not arrive"};
  }
  judge_computes(m, factor, slow);
  judge_links(m, v, slow);
  for (auto& [rank, s] : slow) v.slow.push_back(std::move(s));
  return v;
}

Verdict confirmed(const Verdict& first, const Verdict& second) {
  Verdict v = second;
  v.slow.clear();
  // Only the first measurement's suspects are judged again: a node it found fast is not kept out
  // by a second measurement that was not about it (on a loaded host the confirmation, three times
  // as long, can time out on every node).
  for (const SlowNode& s : second.slow) {
    if (first.kept_out(s.node_rank) != nullptr) v.slow.push_back(s);
  }
  for (const SlowNode& s : first.slow) {
    if (s.probe == kNoAnswer && v.kept_out(s.node_rank) == nullptr) v.slow.push_back(s);
  }
  std::sort(v.slow.begin(), v.slow.end(),
            [](const SlowNode& a, const SlowNode& b) { return a.node_rank < b.node_rank; });
  return v;
}

boost::asio::awaitable<bool> needed(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                    rendezvous::Round r) {
  rendezvous::Scope scope = rendezvous::Scope::job();
  std::string topic = kPassed;
  const std::vector<std::string> checked = co_await rdzv->gather(
      std::move(scope), std::move(topic), r.num_nodes, std::chrono::milliseconds(0));
  const std::set<std::string> ids(checked.begin(), checked.end());
  if (r.members.empty()) co_return true;  // nodes that cannot be told apart are checked
  co_return std::any_of(r.members.begin(), r.members.end(),
                        [&ids](const std::string& m) { return !ids.contains(m); });
}

boost::asio::awaitable<std::optional<Verdict>> exchange(
    std::shared_ptr<rendezvous::Rendezvous> rdzv, rendezvous::Round r, int pass, ProbeReport mine,
    double factor, std::chrono::milliseconds wait, std::optional<Verdict> first) {
  // (Named arguments for the co_await'ed calls: g++ 12 destroyed a temporary one twice.)
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  const std::string suffix = pass == 0 ? "" : fmt::format(".pass{}", pass);
  std::string reports_topic = kReports + suffix;
  std::string verdict_topic = kVerdict + suffix;
  try {
    co_await rdzv->publish(scope, reports_topic, mine.to_json().dump());
  } catch (const std::exception& e) {
    spdlog::warn("node check: could not publish this node's measurements: {}", e.what());
  }
  if (r.node_rank == 0) {
    std::vector<ProbeReport> reports;
    for (const std::string& text : co_await rdzv->gather(scope, reports_topic, r.num_nodes, wait)) {
      if (std::optional<ProbeReport> report = ProbeReport::from_json(text)) {
        reports.push_back(std::move(*report));
      }
    }
    Verdict judged = judge(reports, r.num_nodes, factor);
    if (first) {
      for (const SlowNode& s : judged.slow) {
        if (first->kept_out(s.node_rank) != nullptr) continue;
        spdlog::warn(
            "node check: node {} measured again: {} ({}); the first measurement found it within "
            "{:g}x the round's median: it stays in",
            s.node_rank, s.probe, s.ratio > 0 ? fmt::format("{:.2f}x", s.ratio) : s.detail, factor);
      }
      judged = confirmed(*first, judged);
    }
    std::string verdict = judged.to_json().dump();
    try {
      co_await rdzv->publish(scope, verdict_topic, verdict);
      // `ddprun status` shows the check before the workers start (measurements 0 and 1): a later
      // one, the straggler check's, keeps no node out by itself.
      if (pass <= 1) {
        rendezvous::Scope job = rendezvous::Scope::job();
        std::string status_topic = rendezvous::kNodeCheckTopic;
        nlohmann::json shown = nlohmann::json::parse(verdict);
        shown["round"] = r.number;
        shown["members"] = r.members;
        co_await rdzv->publish(std::move(job), std::move(status_topic), shown.dump());
      }
    } catch (const std::exception& e) {
      spdlog::warn("node check: could not publish the verdict: {}", e.what());
    }
  }
  const std::vector<std::string> verdicts =
      co_await rdzv->gather(std::move(scope), std::move(verdict_topic), 1, wait * 2);
  if (verdicts.empty()) co_return std::nullopt;
  co_return Verdict::from_json(verdicts.front());
}

boost::asio::awaitable<void> passed(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                    rendezvous::Round r) {
  rendezvous::Scope scope = rendezvous::Scope::job();
  std::string topic = kPassed;
  std::string id = r.members.at(static_cast<size_t>(r.node_rank));
  try {
    co_await rdzv->publish(std::move(scope), std::move(topic), std::move(id));
  } catch (const std::exception& e) {
    spdlog::warn("node check: could not record this node as checked: {}", e.what());
  }
}

}  // namespace ddprun::agent::node_check
