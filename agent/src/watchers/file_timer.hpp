#pragma once
// torch's expiration timers (torch.distributed.elastic.timer: FileTimerClient and expires()),
// served as torchrun serves them when TORCHELASTIC_ENABLE_FILE_TIMER=1. Workers open the FIFO named
// by TORCHELASTIC_TIMER_FILE, write one JSON line per request and close it:
//   {"version": 1, "pid": P, "scope_id": "S", "expiration_time": T, "signal": N}
// T is a Unix time in seconds: a timer on (P, S) that expires then, or, when negative, the release
// of that timer. When a timer expires, its worker gets signal N (none when N <= 0, as in torch).
//
// Unlike torchrun 2.14 the server never signals itself, and it trusts nothing it reads: a garbage
// or oversized line, and a request naming a pid that is not one of this node's workers, is logged
// (rate-limited) and ignored; the FIFO is read by event on the agent's io_context, so a flood costs
// reading it and never blocks the agent.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/store/warning_limiter.hpp"

namespace ddprun::agent {

struct TimerRequest {
  int pid = 0;
  std::string scope;
  double expiration_time = 0;  // Unix seconds; < 0: release
  int signal = 0;
};

// One line of the FIFO (without its newline); nullopt with the reason in `why` when it is not a
// request.
std::optional<TimerRequest> parse_timer_request(std::string_view line, std::string* why);

// A timer that ran out: its worker, scope, signal, and how long past its deadline it was seen.
struct ExpiredTimer {
  int pid = 0;
  std::string scope;
  int signal = 0;
  std::chrono::milliseconds overstay{0};
};

class FileTimerServer {
 public:
  // Longest request line, torch's limit (PIPE_BUF); a longer one is dropped whole.
  static constexpr size_t kMaxLine = 4096;
  // Timers kept at once, over all workers; requests for more are dropped.
  static constexpr size_t kMaxTimers = 65536;

  // Whether pid is one of this node's running workers.
  using IsWorker = std::function<bool(int pid)>;
  // Called for each expired timer with a signal > 0 (the earliest per worker; the worker's other
  // timers go with it); it sends the signal.
  using Expire = std::function<void(const ExpiredTimer&)>;
  // Called for each accepted request (a timer set or cleared): the worker made progress.
  using Progress = std::function<void(int pid)>;

  // Creates the FIFO at `path` (replacing what is there) and serves it on `io`. Throws
  // std::runtime_error when it cannot.
  FileTimerServer(boost::asio::io_context& io, std::string path, IsWorker is_worker, Expire expire,
                  Progress progress = nullptr);
  // Removes the FIFO.
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }
  // Applies one request as if read from the FIFO.
  void apply(const TimerRequest& request);
  // The timers set now.
  size_t size() const { return timers_.size(); }

 private:
  void read();
  void consume(std::string_view bytes);
  void line(std::string_view text);
  void arm();
  void check();

  std::string path_;
  IsWorker is_worker_;
  Expire expire_;
  Progress progress_;
  boost::asio::posix::stream_descriptor reader_;
  int keep_open_ = -1;  // a writer of our own: the FIFO never reads as ended
  boost::asio::steady_timer tick_;
  // False once this is destroyed: a tick whose timer had fired before the cancel still runs.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool ticking_ = false;
  std::string partial_;
  bool skipping_ = false;  // inside an oversized line, up to its newline
  char buffer_[8192];
  std::map<std::pair<int, std::string>, TimerRequest> timers_;
  // One limit per kind, so that a flood of one hides none of the others.
  store::WarningLimiter malformed_, oversized_, foreign_, full_;
};

}  // namespace ddprun::agent
