#include "op_watchdog.hpp"

#include "ddp/errors.hpp"

namespace ddp {

OpWatchdog::OpWatchdog(ErrorProbe comm_error, std::function<void()> abort)
    : comm_error_(std::move(comm_error)), abort_(std::move(abort)) {}

Work OpWatchdog::add(std::string what, Clock::time_point deadline, DoneProbe done) {
  std::lock_guard lock(mu_);
  Pending p{std::move(what), deadline, std::move(done), {}};
  Work work(p.promise.get_future().share());
  if (aborted_) {
    p.promise.set_exception(std::make_exception_ptr(
        CommError(p.what + " not run: the communicator was aborted (" + abort_reason_ + ")")));
    return work;
  }
  pending_.push_back(std::move(p));
  return work;
}

void OpWatchdog::fail_all(const std::string& reason, bool timeout) {
  if (!aborted_) {
    aborted_ = true;
    abort_reason_ = reason;
    abort_();
  }
  for (Pending& p : pending_) {
    const std::string msg = p.what + ": " + reason;
    p.promise.set_exception(timeout ? std::make_exception_ptr(TimeoutError(msg))
                                    : std::make_exception_ptr(CommError(msg)));
  }
  pending_.clear();
}

size_t OpWatchdog::poll(Clock::time_point now) {
  std::lock_guard lock(mu_);
  // Operations finish in launch order on one stream: settle from the front.
  while (!pending_.empty() && pending_.front().done()) {
    pending_.front().promise.set_value();
    pending_.pop_front();
  }
  if (pending_.empty()) return 0;
  if (auto error = comm_error_()) {
    fail_all("communicator error: " + *error, false);
    return 0;
  }
  for (const Pending& p : pending_) {
    if (now >= p.deadline) {
      fail_all(p.what + " passed its deadline (a peer is gone or stuck); communicator aborted",
               true);
      return 0;
    }
  }
  return pending_.size();
}

bool OpWatchdog::aborted() const {
  std::lock_guard lock(mu_);
  return aborted_;
}

}  // namespace ddp
