#include "checkpoint/checkpoint_status.hpp"

#include <algorithm>
#include <exception>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <nlohmann/json.hpp>

#include "checkpoint/memory_use.hpp"

namespace ddprun::agent {
namespace {
// How often the account is looked at, and published when it changed: a store write per node at
// most this often.
constexpr auto kInterval = std::chrono::seconds(5);
}  // namespace

CheckpointStatus::CheckpointStatus(boost::asio::io_context& io,
                                   std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                   const CheckpointRegions& regions)
    : io_(io), rdzv_(std::move(rdzv)), regions_(regions), timer_(io) {}

void CheckpointStatus::watch(std::vector<std::pair<int, int>> local_and_global) {
  ranks_ = std::move(local_and_global);
  timer_.cancel();
  if (!stopped_) tick();
}

void CheckpointStatus::stop() {
  stopped_ = true;
  timer_.cancel();
}

void CheckpointStatus::persisted(int64_t step, double seconds) {
  if (!persisted_ || step >= persisted_->first) persisted_ = std::pair{step, seconds};
}

nlohmann::json CheckpointStatus::account() const {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& [local, global] : ranks_) {
    const std::optional<RegionHeader> h = regions_.header(local);
    const int newest = h ? h->newest_committed() : -1;
    nlohmann::json r = {{"rank", global}, {"local_rank", local}};
    r["step"] = newest < 0 ? nlohmann::json(nullptr) : nlohmann::json(h->slots[newest].step);
    r["save_seconds"] = newest < 0 ? 0.0 : static_cast<double>(h->save_micros[newest]) / 1e6;
    ranks.push_back(std::move(r));
  }
  nlohmann::json a = {{"bytes", regions_.bytes_held()}, {"ranks", std::move(ranks)}};
  a["persisted"] =
      persisted_ ? nlohmann::json{{"step", persisted_->first}, {"seconds", persisted_->second}}
                 : nlohmann::json(nullptr);
  if (replica_) {
    if (nlohmann::json r = replica_(); !r.is_null()) a["replica"] = std::move(r);
  }
  if (!restored_.is_null()) a["restored"] = restored_;
  nlohmann::json memory = checkpoint_memory(regions_.path()).to_json();
  memory["limit"] = budget_ ? nlohmann::json(*budget_) : nlohmann::json(nullptr);
  a["memory"] = std::move(memory);
  return a;
}

void CheckpointStatus::tick() {
  const nlohmann::json a = account();
  // Nothing to show before any rank saved: a job without checkpoints writes nothing.
  const bool holds = persisted_ || a.contains("replica") ||
                     std::any_of(a["ranks"].begin(), a["ranks"].end(),
                                 [](const auto& r) { return !r["step"].is_null(); });
  // (A peer's origin or a --checkpoint_dir path need not be UTF-8: replaced, never thrown.)
  std::string text = a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (holds && text != published_) {
    published_ = text;
    boost::asio::co_spawn(
        io_,
        [rdzv = rdzv_, text = std::move(text)]() mutable -> boost::asio::awaitable<void> {
          rendezvous::Scope scope = rendezvous::Scope::job();
          std::string topic = rendezvous::kCheckpointsTopic;
          try {
            co_await rdzv->publish(std::move(scope), std::move(topic), std::move(text));
          } catch (const std::exception&) {
            // The store is gone or the job ended: nothing to show it to.
          }
        },
        boost::asio::detached);
  }
  timer_.expires_after(kInterval);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !stopped_) tick();
  });
}

}  // namespace ddprun::agent
