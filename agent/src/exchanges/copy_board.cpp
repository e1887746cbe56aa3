#include "exchanges/copy_board.hpp"

#include <algorithm>
#include <charconv>
#include <utility>

#include <spdlog/spdlog.h>

namespace ddprun::agent::copy_board {
namespace {

constexpr const char* kTopic = "checkpoint_copies";
constexpr int64_t kWidest = int64_t{1} << 20;  // what a node may ask for; more is not a stride

std::optional<int64_t> number(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

class RoundBoard : public CopyBoard {
 public:
  RoundBoard(std::shared_ptr<rendezvous::Rendezvous> rdzv, rendezvous::Round r)
      : rdzv_(std::move(rdzv)), round_(std::move(r)) {}

  boost::asio::awaitable<bool> say(Said said) override {
    rendezvous::Scope scope = rendezvous::Scope::of(round_);
    std::string topic = kTopic;
    std::string text = to_text(said);
    try {
      co_await rdzv_->publish(std::move(scope), std::move(topic), std::move(text));
      failing_ = false;
      co_return true;
    } catch (const std::exception& e) {
      if (!std::exchange(failing_, true)) {
        spdlog::warn(
            "could not tell the other nodes what this node's checkpoint copies need ({}): {}; "
            "said again until the store takes it",
            to_text(said), e.what());
      }
    }
    co_return false;
  }

  boost::asio::awaitable<Read> read() override {
    rendezvous::Scope scope = rendezvous::Scope::of(round_);
    std::string topic = kTopic;
    const std::vector<std::string> texts = co_await rdzv_->gather(
        std::move(scope), std::move(topic), round_.num_nodes, std::chrono::milliseconds(0));
    Read read;
    for (const std::string& text : texts) {
      const std::optional<Said> said = from_text(text);
      if (!said) continue;
      read.widest = std::max(read.widest, said->stride);
      if (said->keep) read.keep.push_back(*said->keep);
    }
    std::sort(read.keep.begin(), read.keep.end());
    read.keep.erase(std::unique(read.keep.begin(), read.keep.end()), read.keep.end());
    co_return read;
  }

 private:
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  rendezvous::Round round_;
  bool failing_ = false;  // the last say() failed (logged)
};

}  // namespace

std::string to_text(const CopyBoard::Said& said) {
  return std::to_string(said.stride) + " " + (said.keep ? std::to_string(*said.keep) : "-");
}

std::optional<CopyBoard::Said> from_text(const std::string& text) {
  const size_t blank = text.find(' ');
  if (blank == std::string::npos) return std::nullopt;
  const std::optional<int64_t> stride = number(std::string_view(text).substr(0, blank));
  if (!stride || *stride < 1 || *stride > kWidest) return std::nullopt;
  CopyBoard::Said said{*stride, std::nullopt};
  const std::string_view keep = std::string_view(text).substr(blank + 1);
  if (keep == "-") return said;
  said.keep = number(keep);
  if (!said.keep) return std::nullopt;
  return said;
}

std::shared_ptr<CopyBoard> board(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                 rendezvous::Round r) {
  return std::make_shared<RoundBoard>(std::move(rdzv), std::move(r));
}

}  // namespace ddprun::agent::copy_board
