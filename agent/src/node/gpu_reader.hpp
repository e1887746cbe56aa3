#pragma once
// NVML's view of the GPUs, read off the agent's event loop: a GPU or driver that wedges (an Xid
// error can leave NVML's calls blocked for minutes) holds one thread of its own, never the agent,
// which then still answers signals, its peers and the rendezvous, and says what happened.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "ddprun/agent/gpu_health.hpp"

namespace ddprun::agent {

class GpuReader {
 public:
  using Read = std::function<std::vector<GpuState>()>;
  // `read` (Nvml::read, holding what it reads from alive) runs on a thread of its own, one read at
  // a time; a read not done within `limit` is given up (its thread left to finish, or not).
  GpuReader(boost::asio::io_context& io, Read read, std::chrono::milliseconds limit);

  // The GPUs as NVML sees them now; nullopt where the read did not end within the limit (or
  // `within`, where that is sooner), failed, or an earlier read given up has still not ended (no
  // second thread waits on a wedged device).
  boost::asio::awaitable<std::optional<std::vector<GpuState>>> read(
      std::optional<std::chrono::milliseconds> within = std::nullopt);

  std::chrono::milliseconds limit() const { return limit_; }

 private:
  struct Shared;
  boost::asio::io_context& io_;
  Read read_;
  std::chrono::milliseconds limit_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace ddprun::agent
