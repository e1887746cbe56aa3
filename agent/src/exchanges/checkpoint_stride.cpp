#include "exchanges/checkpoint_stride.hpp"

#include <algorithm>
#include <charconv>

#include <spdlog/spdlog.h>

namespace ddprun::agent::checkpoint_stride {
namespace {

constexpr const char* kTopic = "checkpoint_stride";
constexpr int64_t kWidest = int64_t{1} << 20;  // what a node may ask for; more is not a stride

class RoundBoard : public StrideBoard {
 public:
  RoundBoard(std::shared_ptr<rendezvous::Rendezvous> rdzv, rendezvous::Round r)
      : rdzv_(std::move(rdzv)), round_(std::move(r)) {}

  boost::asio::awaitable<void> wish(int64_t stride) override {
    rendezvous::Scope scope = rendezvous::Scope::of(round_);
    std::string topic = kTopic;
    std::string text = std::to_string(stride);
    try {
      co_await rdzv_->publish(std::move(scope), std::move(topic), std::move(text));
    } catch (const std::exception& e) {
      spdlog::warn("could not tell the other nodes that checkpoint copies need a stride of {}: {}",
                   stride, e.what());
    }
  }

  boost::asio::awaitable<int64_t> widest() override {
    rendezvous::Scope scope = rendezvous::Scope::of(round_);
    std::string topic = kTopic;
    const std::vector<std::string> said = co_await rdzv_->gather(
        std::move(scope), std::move(topic), round_.num_nodes, std::chrono::milliseconds(0));
    int64_t widest = 1;
    for (const std::string& s : said) {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc() && end == s.data() + s.size() && v > 0 && v <= kWidest)
        widest = std::max(widest, v);
    }
    co_return widest;
  }

 private:
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  rendezvous::Round round_;
};

}  // namespace

std::shared_ptr<StrideBoard> board(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                   rendezvous::Round r) {
  return std::make_shared<RoundBoard>(std::move(rdzv), std::move(r));
}

}  // namespace ddprun::agent::checkpoint_stride
