#include "exchanges/hang_exchange.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace ddprun::agent::hang_exchange {
namespace {

constexpr const char* kFlag = "hang";
constexpr const char* kFrozen = "hang_frozen";
constexpr const char* kFrames = "hang_frames";

// Publishes `value` for `topic` in `r` and gathers every node's (bounded by `wait`).
boost::asio::awaitable<std::vector<std::string>> share(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                                       rendezvous::Round r, std::string topic,
                                                       std::string value,
                                                       std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  try {
    co_await rdzv->publish(scope, topic, std::move(value));
  } catch (const std::exception& e) {
    spdlog::warn("could not share this node's {} with the others: {}", topic, e.what());
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  co_return co_await rdzv->gather(std::move(scope), std::move(topic), r.num_nodes,
                                  std::max(left, std::chrono::milliseconds(0)));
}

}  // namespace

boost::asio::awaitable<void> announce(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                      rendezvous::Round r) {
  std::string reason = fmt::format("a rank of node {} is hung", r.member(r.node_rank));
  // (Named arguments for the co_await'ed calls: g++ 12 destroyed a temporary one twice.)
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = kFlag;
  std::string none;
  co_await rdzv->raise(std::move(scope), std::move(topic), std::move(reason), std::move(none));
}

bool peer_hang(const rendezvous::Rendezvous& rdzv, const rendezvous::Round& r) {
  const auto flag = rdzv.raised(rendezvous::Scope::of(r), kFlag);
  return flag && !flag->mine;
}

boost::asio::awaitable<void> frozen(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                    rendezvous::Round r, std::chrono::milliseconds wait) {
  std::string topic = kFrozen;
  std::string none;
  co_await share(rdzv, r, std::move(topic), std::move(none), wait);
}

boost::asio::awaitable<std::vector<std::string>> frames(
    std::shared_ptr<rendezvous::Rendezvous> rdzv, rendezvous::Round r, std::string frames,
    std::chrono::milliseconds wait) {
  std::string topic = kFrames;
  co_return co_await share(rdzv, r, std::move(topic), std::move(frames), wait);
}

}  // namespace ddprun::agent::hang_exchange
