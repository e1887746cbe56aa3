#include "etcd_leadership.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "etcd_connection.hpp"

namespace ddprun::rendezvous::etcd {
namespace asio = boost::asio;
using asio::use_awaitable;
using nlohmann::json;

namespace {

// The answers of one probe, filled in by one coroutine per member.
struct Answers {
  Answers(asio::any_io_executor ex, size_t members, size_t cluster_size)
      : all(members), arrived(members), cluster_size(cluster_size), done(ex) {}
  std::vector<MemberAnswer> all;
  std::vector<bool> arrived;
  size_t cluster_size;
  asio::steady_timer done;  // cancelled once the answers settle the verdict
};

// One member to ask, and where its answer goes.
struct Question {
  Endpoint endpoint;
  std::string known_id;  // its member ID, where known
  size_t index = 0;      // into Answers::all
};

// The status of the member `q` names, into answers->all[q.index].
asio::awaitable<void> ask(Question q, std::shared_ptr<asio::ssl::context> tls,
                          Clock::time_point deadline, std::shared_ptr<Answers> answers) {
  MemberAnswer a;
  try {
    const auto c = std::make_unique<Connection>(co_await asio::this_coro::executor, tls);
    co_await c->connect(q.endpoint, deadline);
    co_await c->send("/v3/maintenance/status", "{}", deadline);
    const auto res = co_await c->read_response(deadline);
    c->close();
    const json j = json::parse(res.body(), nullptr, false);
    if (res.result_int() == 200 && j.is_object()) {
      a.kind = MemberAnswer::Kind::kAnswered;
      a.member = j.value("header", json::object()).value("member_id", std::string());
      a.leader = j.value("leader", std::string());
      if (a.leader == "0") a.leader.clear();
    }
  } catch (const boost::system::system_error& e) {
    if (e.code() == asio::error::connection_refused) {
      a.kind = MemberAnswer::Kind::kRefused;
      a.member = q.known_id;
    }
  } catch (const std::exception&) {  // silent, as far as this probe can tell
  }
  answers->all[q.index] = std::move(a);
  answers->arrived[q.index] = true;
  if (leadership_settled(answers->all, answers->arrived, answers->cluster_size)) {
    answers->done.cancel();
  }
}

// "host:port" of a client URL ("http://127.0.0.1:2379"), IPv6 hosts without brackets.
std::pair<std::string, std::string> host_port(const std::string& url) {
  std::string rest = url.substr(url.find("://") == std::string::npos ? 0 : url.find("://") + 3);
  rest = rest.substr(0, rest.find('/'));
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) return {rest, ""};
  std::string host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return {host, rest.substr(colon + 1)};
}

}  // namespace

LeadershipProbe::LeadershipProbe(asio::any_io_executor ex, std::vector<Endpoint> endpoints,
                                 std::shared_ptr<asio::ssl::context> tls)
    : ex_(ex),
      endpoints_(std::move(endpoints)),
      tls_(std::move(tls)),
      member_ids_(endpoints_.size()),
      cluster_size_(endpoints_.size()) {}

asio::awaitable<void> LeadershipProbe::learn_members(Client& client, Clock::time_point deadline) {
  const json list = co_await client.call("/v3/cluster/member/list", json::object(), deadline);
  const json members = list.value("members", json::array());
  cluster_size_ = std::max(endpoints_.size(), members.size());
  for (const auto& m : members) {
    for (const auto& url : m.value("clientURLs", json::array())) {
      if (!url.is_string()) continue;
      const auto [host, port] = host_port(url.get<std::string>());
      for (size_t i = 0; i < endpoints_.size(); ++i) {
        if (endpoints_[i].host == host && std::to_string(endpoints_[i].port) == port) {
          member_ids_[i] = m.value("ID", std::string());
        }
      }
    }
  }
}

asio::awaitable<bool> LeadershipProbe::no_live_leader(Clock::time_point deadline) {
  auto answers = std::make_shared<Answers>(ex_, endpoints_.size(), cluster_size_);
  answers->done.expires_at(deadline);
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    asio::co_spawn(ex_, ask(Question{endpoints_[i], member_ids_[i], i}, tls_, deadline, answers),
                   asio::detached);
  }
  co_await answers->done.async_wait(asio::as_tuple(use_awaitable));
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const MemberAnswer& a = answers->all[i];
    if (a.kind == MemberAnswer::Kind::kAnswered && !a.member.empty()) member_ids_[i] = a.member;
  }
  const bool without = majority_without_live_leader(answers->all, cluster_size_);
  if (spdlog::should_log(spdlog::level::debug)) {
    std::string said;
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      const MemberAnswer& a = answers->all[i];
      said += fmt::format(" {}: {};", describe(endpoints_[i]),
                          a.kind == MemberAnswer::Kind::kSilent ? "silent"
                          : a.kind == MemberAnswer::Kind::kRefused
                              ? fmt::format("refused ({})", a.member)
                          : a.leader.empty() ? "no leader"
                                             : fmt::format("leader {}", a.leader));
    }
    spdlog::debug("etcd leadership ({} members):{} a majority {} a live leader", cluster_size_,
                  said, without ? "lacks" : "may have");
  }
  co_return without;
}

}  // namespace ddprun::rendezvous::etcd
