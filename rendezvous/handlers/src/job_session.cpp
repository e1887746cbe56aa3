#include "ddprun/rendezvous/job_session.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ddprun/rendezvous/job_records.hpp"
#include "ddprun/store/auth.hpp"
#include "ddprun/store/errors.hpp"
#include "job_keys.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

JobSession::JobSession(asio::any_io_executor ex, std::shared_ptr<JobStore> store)
    : ex_(ex), store_(std::move(store)) {}

JobSession::~JobSession() = default;

int JobSession::nproc_of_record(const std::string& record) {
  const auto node = records::parse_node(record);
  return node && node->nproc > 0 ? node->nproc : 1;
}

namespace {

// Why `mine` cannot join a job whose settings are `theirs` (a JSON object).
std::string disagreement(const JobSession::Settings& mine, const std::string& theirs) {
  const auto job = records::parse_settings(theirs);
  for (const auto& [flag, value] : mine) {
    std::string other = theirs;  // not an object: shown whole
    if (job) {
      const auto it = job->find(flag);
      other = it == job->end() ? "(unset)" : it->second;
    }
    if (other != value) {
      return fmt::format(
          "this node's {}={} differs from the job's {}={} (fixed by the first node to join): every "
          "node of a job needs the same value",
          flag, value, flag, other);
    }
  }
  return fmt::format("this node's settings {} differ from the job's {}",
                     records::settings_text(mine), theirs);
}

}  // namespace

asio::awaitable<void> JobSession::agree_on(Settings settings) {
  const std::string mine = records::settings_text(settings);
  const std::string key(keys::kSettings);
  const std::string job = co_await store_->compare_set(key, "", mine);
  if (job != mine) {
    const std::string why = disagreement(settings, job);
    leave_store();
    throw store::StoreError(why);
  }
}

asio::awaitable<void> JobSession::open(std::string presence_key, std::string value,
                                       WatchSet watched) {
  presence_key_ = presence_key;
  if (!follows_all_of(watched, presence_key)) watched.keys.push_back(presence_key);
  if (!follows_all_of(watched, keys::kFlags)) watched.prefixes.emplace_back(keys::kFlags);
  if (membership_listener_ && !follows_all_of(watched, keys::kNodes)) {
    watched.prefixes.emplace_back(keys::kNodes);
  }
  watched_ = watched;
  for (const auto& e : co_await store_->join(presence_key, value, std::move(watched))) apply(e);
  opened_ = true;
  asio::co_spawn(ex_, pump(), asio::detached);
}

bool JobSession::follows_all_of(const WatchSet& watched, std::string_view prefix) {
  return std::any_of(watched.prefixes.begin(), watched.prefixes.end(),
                     [&](const std::string& p) { return prefix.starts_with(p); });
}

asio::awaitable<void> JobSession::follow(std::vector<std::string> prefixes) {
  std::vector<std::string> added = prefixes;  // followed once the store follows them, not before
  for (const auto& e : co_await store_->watch_prefixes(std::move(prefixes))) apply(e);
  for (auto& p : added) watched_.prefixes.push_back(std::move(p));
}

void JobSession::watch_membership(std::function<void(const MembershipChange&)> listener) {
  const bool first = !membership_listener_;
  membership_listener_ = std::move(listener);
  if (first && opened_ && !left_ && !follows_all_of(watched_, keys::kNodes)) {
    asio::co_spawn(ex_, follow_membership(), asio::detached);
  }
}

asio::awaitable<void> JobSession::follow_membership() {
  const auto self = shared_from_this();
  try {
    std::vector<std::string> prefixes;
    prefixes.emplace_back(keys::kNodes);
    co_await follow(std::move(prefixes));
  } catch (const std::exception& e) {
    if (!left_) spdlog::warn("could not follow the job's membership: {}", e.what());
  }
}

void JobSession::apply(const KeyEvent& e) {
  if (e.key == presence_key_) {
    if (e.deleted && present_) expelled_ = true;
    present_ = !e.deleted;
  }
  if (e.key.starts_with(keys::kNodes)) report_membership(e);
  try {
    if (!book_.apply(e.key, e.value, e.deleted)) on_event(e);
  } catch (const std::exception& ex) {
    spdlog::warn("ignoring malformed rendezvous key '{}': {}", e.key, ex.what());
  }
  notify();
}

void JobSession::report_membership(const KeyEvent& e) {
  const auto known = node_records_.find(e.key);
  if (e.deleted == (known == node_records_.end())) return;  // no change of membership
  const std::string record = e.deleted ? known->second : e.value;
  if (e.deleted) {
    node_records_.erase(known);
  } else {
    node_records_[e.key] = e.value;
  }
  if (!membership_listener_) return;
  MembershipChange change;
  change.node = e.key.substr(6);
  change.joined = !e.deleted;
  if (const auto node = records::parse_node(record)) {
    change.host = node->host;
    change.nproc = node->nproc;
  }
  membership_listener_(change);
}

asio::awaitable<void> JobSession::pump() {
  const auto self = shared_from_this();  // the session outlives this coroutine
  while (!left_) {
    try {
      apply(co_await store_->next_event());
    } catch (const std::exception& e) {
      if (!left_) broken_ = e.what();
      notify();
      break;
    }
  }
}

void JobSession::stop_waiting() {
  stop_waiting_ = true;
  notify();
}

void JobSession::notify() {
  for (auto* t : waiters_) t->cancel();
}

asio::awaitable<bool> JobSession::wait_until(std::function<bool()> pred,
                                             Clock::time_point deadline) {
  asio::steady_timer timer(ex_);
  waiters_.push_back(&timer);
  struct Waiting {  // out of waiters_ however the wait ends (a cancellation throws)
    std::vector<asio::steady_timer*>& waiters;
    asio::steady_timer* timer;
    ~Waiting() { std::erase(waiters, timer); }
  } waiting{waiters_, &timer};
  while (!pred() && broken_.empty() && Clock::now() < deadline) {
    timer.expires_at(deadline);
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  if (!broken_.empty()) throw store::StoreConnectionError(broken_);
  co_return pred();
}

void JobSession::leave_store() {
  if (left_) return;
  left_ = true;
  broken_ = "this agent left the job";  // any waiter still parked (an old round's watcher) ends
  store_->leave();
  notify();
}

std::string JobSession::self_id() const {
  return std::string(keys::after(presence_key_, keys::kNodes));
}

asio::awaitable<void> JobSession::publish(Scope scope, std::string topic, std::string value) {
  const std::string key = ExchangeBook::value_key(scope, topic, self_id());
  book_.put_value(scope, topic, self_id(), value);
  co_await store_->set(key, value);
}

asio::awaitable<std::string> JobSession::job_secret() {
  const std::string mine = store::auth::fresh_secret();
  co_return co_await store_->compare_set(std::string(keys::kSecret), "", mine);
}

asio::awaitable<std::vector<std::string>> JobSession::gather(Scope scope, std::string topic,
                                                             int expected,
                                                             std::chrono::milliseconds wait) {
  const auto self = shared_from_this();
  const auto deadline = Clock::now() + wait;
  try {
    std::string prefix = ExchangeBook::values_prefix(scope, topic);
    if (!follows_all_of(watched_, prefix)) {
      std::vector<std::string> prefixes;
      prefixes.push_back(std::move(prefix));
      co_await follow(std::move(prefixes));
    }
    const std::optional<int> round = scope.round();
    co_await wait_until(
        [&] {
          return book_.count(scope, topic) >= static_cast<std::size_t>(expected) ||
                 (round && round_over(*round));
        },
        deadline);
  } catch (const std::exception& e) {
    spdlog::warn("could not gather every node's {}: {}", topic, e.what());
  }
  co_return book_.values(scope, topic);
}

asio::awaitable<void> JobSession::raise(Scope scope, std::string topic, std::string reason,
                                        std::string detail) {
  if (!member()) co_return;  // nobody to tell: the others never counted this node
  const auto self = shared_from_this();
  Flag mine;
  mine.node = self_id();
  mine.reason = std::move(reason);
  mine.detail = std::move(detail);
  try {
    const std::string key = ExchangeBook::flag_key(scope, topic);
    const std::string text = ExchangeBook::flag_text(mine);
    std::string first = co_await store_->compare_set(key, "", text);
    book_.apply(key, first, false);  // the first raise, this one or another node's
    if (!book_.flag(scope, topic)) {
      // Raised by a node of another membership that had this round's number: not this round's.
      first = co_await store_->compare_set(key, first, text);
      book_.apply(key, first, false);
    }
  } catch (const std::exception& e) {
    spdlog::warn("could not tell the other nodes ({}): {}", mine.reason, e.what());
    book_.put_flag(scope, topic, std::move(mine));
  }
  notify();
}

std::optional<Flag> JobSession::raised(Scope scope, std::string topic) const {
  auto f = book_.flag(scope, topic);
  if (f) f->mine = f->node == self_id();
  return f;
}

std::optional<Flag> JobSession::peer_flag(const Round& r) const {
  if (auto f = book_.peer_flag(Scope::of(r), self_id())) return f;
  return peer_job_flag();
}

bool JobSession::round_flagged(int number) const {
  Round r;
  r.number = number;
  return book_.flagged(Scope::of(r));
}

std::optional<Flag> JobSession::peer_job_flag() const {
  return book_.peer_flag(Scope::job(), self_id());
}

}  // namespace ddprun::rendezvous
