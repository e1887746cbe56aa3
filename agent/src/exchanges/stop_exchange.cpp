#include "exchanges/stop_exchange.hpp"

#include <string>

#include <fmt/format.h>

namespace ddprun::agent::stop_exchange {
namespace {
constexpr const char* kTopic = "stop";
}  // namespace

boost::asio::awaitable<void> announce(std::shared_ptr<rendezvous::Rendezvous> rdzv, int node_rank,
                                      int signo) {
  if (!rdzv->membership_fixed()) co_return;
  // (Named arguments for the co_await'ed call: g++ 12 destroyed a temporary one twice.)
  rendezvous::Scope scope = rendezvous::Scope::job();
  std::string topic = kTopic;
  std::string reason = fmt::format("node {} was stopped by signal {}", node_rank, signo);
  std::string detail = std::to_string(signo);
  co_await rdzv->raise(std::move(scope), std::move(topic), std::move(reason), std::move(detail));
}

int peer_signal(const rendezvous::Rendezvous& rdzv) {
  const auto flag = rdzv.raised(rendezvous::Scope::job(), kTopic);
  if (!flag || flag->mine) return 0;
  try {
    return std::stoi(flag->detail);
  } catch (const std::exception&) {  // not written by an agent: no signal to pass on
    return 0;
  }
}

}  // namespace ddprun::agent::stop_exchange
