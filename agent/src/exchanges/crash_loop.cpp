#include "exchanges/crash_loop.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace ddprun::agent::crash_loop {
namespace {

constexpr const char* kTopic = "crash_loop";

// The innermost frame of a Python traceback: its last `  File "...", line N, in f` line.
std::string innermost_frame(const std::string& traceback) {
  const size_t at = traceback.rfind("  File \"");
  if (at == std::string::npos) return {};
  const size_t end = traceback.find('\n', at);
  return traceback.substr(at + 2, end == std::string::npos ? std::string::npos : end - at - 2);
}

}  // namespace

std::string signature(const std::vector<WorkerFailure>& failures,
                      std::optional<int64_t> resumed_from) {
  if (failures.empty()) return {};
  const WorkerFailure& root = *std::min_element(failures.begin(), failures.end(), failed_earlier);
  std::string how = root.exitcode < 0 ? fmt::format("signal {}", -root.exitcode)
                                      : fmt::format("exit {}", root.exitcode);
  if (root.error) {
    const std::string& m = root.error->message;
    how += ", " + m.substr(0, m.find('\n'));
    if (const std::string frame = innermost_frame(root.error->traceback); !frame.empty()) {
      how += " at " + frame;
    }
  }
  if (!root.ended_because.empty())
    how += ", " + root.ended_because.substr(0, root.ended_because.find('\n'));
  return fmt::format("rank {}: {}; resumed from {}", root.rank, how,
                     resumed_from ? fmt::format("step {}", *resumed_from) : "nothing");
}

bool repeats(const std::vector<std::string>& history, int attempts) {
  if (attempts < 2 || history.size() < static_cast<size_t>(attempts)) return false;
  const auto last = history.end() - attempts;
  return !last->empty() &&
         std::all_of(last, history.end(), [&](const auto& s) { return s == *last; });
}

boost::asio::awaitable<void> announce(std::shared_ptr<rendezvous::Rendezvous> rdzv,
                                      std::string reason) {
  // (Named arguments for the co_await'ed call: g++ 12 destroyed a temporary one twice.)
  rendezvous::Scope scope = rendezvous::Scope::job();
  std::string topic = kTopic;
  std::string detail;
  co_await rdzv->raise(std::move(scope), std::move(topic), std::move(reason), std::move(detail));
}

std::optional<std::string> announced(const rendezvous::Rendezvous& rdzv) {
  const auto flag = rdzv.raised(rendezvous::Scope::job(), kTopic);
  if (!flag || flag->mine) return std::nullopt;
  return flag->reason;
}

}  // namespace ddprun::agent::crash_loop
