#include "exchanges/failure_reports.hpp"

#include <chrono>

#include <fmt/format.h>

namespace ddprun::agent::failure_reports {
namespace {
constexpr const char* kFailedFlag = "worker_failed";
}  // namespace

boost::asio::awaitable<void> announce(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                      rendezvous::Round r) {
  std::string reason = fmt::format("a worker of node {} failed", r.member(r.node_rank));
  // (Named arguments for the co_await'ed calls: g++ 12 destroyed a temporary one twice.)
  rendezvous::Scope scope = rendezvous::Scope::of(r);
  std::string topic = kFailedFlag;
  std::string none;
  co_await rdzv->raise(std::move(scope), std::move(topic), std::move(reason), std::move(none));
}

boost::asio::awaitable<void> report(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                    rendezvous::Round r, std::string failures) {
  // (Named arguments for the co_await'ed calls: g++ 12 destroyed a temporary one twice.)
  rendezvous::Scope scope = rendezvous::Scope::restart(r.restart_count);
  std::string topic = rendezvous::kFailureReportsTopic;
  co_await rdzv->publish(std::move(scope), std::move(topic), std::move(failures));
  co_await rdzv->end_round(r, true);
}

boost::asio::awaitable<std::vector<std::string>> reported(
    std::shared_ptr<rendezvous::Rendezvous> rdzv, int restart_count) {
  // Every failed node reported before it ended the round: nothing to wait for, only what is there
  // to read.
  rendezvous::Scope scope = rendezvous::Scope::restart(restart_count);
  std::string topic = rendezvous::kFailureReportsTopic;
  co_return co_await rdzv->gather(std::move(scope), std::move(topic), 0,
                                  std::chrono::milliseconds(0));
}

}  // namespace ddprun::agent::failure_reports
