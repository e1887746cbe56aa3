#include "node/gpu_reader.hpp"

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ddprun::agent {
namespace asio = boost::asio;

namespace {

// How often the agent looks whether the read ended (an NVML read takes milliseconds).
constexpr auto kLookEvery = std::chrono::milliseconds(2);

}  // namespace

// What the agent and a read's thread share: kept alive by both, so that a thread that ends after
// the agent gave up (or after the agent is gone) writes into memory that is still there.
struct GpuReader::Shared {
  std::mutex mutex;
  bool reading = false;                           // a thread is in `read`
  std::optional<std::vector<GpuState>> answered;  // its answer, until taken
};

GpuReader::GpuReader(asio::io_context& io, Read read, std::chrono::milliseconds limit)
    : io_(io), read_(std::move(read)), limit_(limit), shared_(std::make_shared<Shared>()) {}

asio::awaitable<std::optional<std::vector<GpuState>>> GpuReader::read(
    std::optional<std::chrono::milliseconds> within) {
  {
    const std::lock_guard lock(shared_->mutex);
    if (shared_->reading) co_return std::nullopt;  // an earlier read still hangs
    shared_->reading = true;
    shared_->answered.reset();
  }
  try {
    std::thread([shared = shared_, read = read_] {
      std::optional<std::vector<GpuState>> gpus;
      try {
        gpus = read();
      } catch (...) {  // (no answer, as where it hangs)
      }
      const std::lock_guard lock(shared->mutex);
      shared->answered = std::move(gpus);
      shared->reading = false;
    }).detach();
  } catch (...) {  // no thread to be had: no answer (reading here could hold the agent)
    const std::lock_guard lock(shared_->mutex);
    shared_->reading = false;
    co_return std::nullopt;
  }
  const auto until = std::chrono::steady_clock::now() + std::min(limit_, within.value_or(limit_));
  asio::steady_timer tick(io_);
  for (;;) {
    {
      const std::lock_guard lock(shared_->mutex);
      if (!shared_->reading) co_return std::exchange(shared_->answered, std::nullopt);
    }
    if (std::chrono::steady_clock::now() >= until) co_return std::nullopt;
    tick.expires_after(kLookEvery);
    co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

}  // namespace ddprun::agent
