#pragma once
// torch's expiration timers (file_timer.hpp) served for the worker group's running workers: a
// request from one of them is progress for its hang watch, and an expired timer sends its worker
// the timer's signal and makes its exit a failure that names the timer and the overstay. Private
// to the agent.
#include <string>

#include <boost/asio/io_context.hpp>

#include "watchers/file_timer.hpp"
#include "workers/attempt.hpp"

namespace ddprun::agent {

class EventLog;

class TorchTimers {
 public:
  // Serves the FIFO at `path` (throws std::runtime_error when it cannot); `group` and `log` (may be
  // null) outlive the timers.
  TorchTimers(boost::asio::io_context& io, std::string path, AttemptControl& group, EventLog* log);

 private:
  // The running worker whose pid this is, in the attempt under way.
  RunningWorker* running(int pid);
  void expire(const ExpiredTimer& timer);
  void progress(int pid);

  AttemptControl& group_;
  EventLog* log_;
  FileTimerServer server_;
};

}  // namespace ddprun::agent
