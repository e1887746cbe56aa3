#include "watchers/file_timer.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "ddprun/agent/signals.hpp"

namespace ddprun::agent {
namespace {

constexpr auto kTick = std::chrono::milliseconds(100);  // torch's max_interval

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::optional<TimerRequest> parse_timer_request(std::string_view line, std::string* why) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *why = "not a JSON object";
    return std::nullopt;
  }
  const auto field = [&](const char* name) -> const nlohmann::json* {
    auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  const auto* pid = field("pid");
  const auto* scope = field("scope_id");
  const auto* expiration = field("expiration_time");
  const auto* signal = field("signal");
  if (pid == nullptr || !pid->is_number_integer() || pid->get<long long>() <= 0 ||
      pid->get<long long>() > INT32_MAX) {
    *why = "no valid pid";
    return std::nullopt;
  }
  if (scope == nullptr || !scope->is_string()) {
    *why = "no scope_id string";
    return std::nullopt;
  }
  if (expiration == nullptr || !expiration->is_number() ||
      !std::isfinite(expiration->get<double>())) {
    *why = "no finite expiration_time";
    return std::nullopt;
  }
  if (signal != nullptr && (!signal->is_number_integer() || signal->get<long long>() > 64 ||
                            signal->get<long long>() < -64)) {
    *why = "signal is not a signal number";
    return std::nullopt;
  }
  return TimerRequest{pid->get<int>(), scope->get<std::string>(), expiration->get<double>(),
                      signal == nullptr ? 0 : signal->get<int>()};
}

FileTimerServer::FileTimerServer(boost::asio::io_context& io, std::string path, IsWorker is_worker,
                                 Expire expire, Progress progress)
    : path_(std::move(path)),
      is_worker_(std::move(is_worker)),
      expire_(std::move(expire)),
      progress_(std::move(progress)),
      reader_(io),
      tick_(io) {
  ::unlink(path_.c_str());
  if (::mkfifo(path_.c_str(), 0600) != 0) {
    throw std::runtime_error(
        fmt::format("cannot create the timer FIFO {}: {}", path_, std::strerror(errno)));
  }
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  keep_open_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 || keep_open_ < 0) {
    const std::string reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    ::unlink(path_.c_str());
    throw std::runtime_error(fmt::format("cannot open the timer FIFO {}: {}", path_, reason));
  }
  reader_.assign(fd);
  spdlog::info("serving torch's expiration timers at {}", path_);
  read();
}

FileTimerServer::~FileTimerServer() {
  *alive_ = false;
  boost::system::error_code ignored;
  reader_.close(ignored);
  tick_.cancel();
  if (keep_open_ >= 0) ::close(keep_open_);
  ::unlink(path_.c_str());
}

void FileTimerServer::read() {
  reader_.async_read_some(
      boost::asio::buffer(buffer_), [this](boost::system::error_code ec, size_t n) {
        if (ec == boost::asio::error::operation_aborted) return;
        if (ec) {
          spdlog::warn("timer FIFO {}: {}; timers are no longer served", path_, ec.message());
          return;
        }
        consume({buffer_, n});
        read();
      });
}

void FileTimerServer::consume(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, nl);
    if (skipping_) {
      if (nl != std::string_view::npos) skipping_ = false;
    } else if (partial_.size() + piece.size() > kMaxLine) {
      oversized_.warn(fmt::format("timer FIFO: a request longer than {} bytes, ignored", kMaxLine));
      partial_.clear();
      skipping_ = nl == std::string_view::npos;
    } else if (nl == std::string_view::npos) {
      partial_.append(piece);
    } else {
      partial_.append(piece);
      line(partial_);
      partial_.clear();
    }
    if (nl == std::string_view::npos) break;
    bytes.remove_prefix(nl + 1);
  }
}

void FileTimerServer::line(std::string_view text) {
  if (text.empty()) return;
  std::string why;
  auto request = parse_timer_request(text, &why);
  if (!request) {
    malformed_.warn(
        fmt::format("timer FIFO: ignored a line that is not a timer request ({})", why));
    return;
  }
  apply(*request);
}

void FileTimerServer::apply(const TimerRequest& request) {
  if (!is_worker_(request.pid)) {
    foreign_.warn(fmt::format(
        "timer FIFO: ignored a request for pid {}, which is not one of this node's workers",
        request.pid));
    return;
  }
  if (progress_) progress_(request.pid);
  const auto key = std::pair{request.pid, request.scope};
  if (request.expiration_time < 0) {
    timers_.erase(key);
    return;
  }
  if (!timers_.contains(key) && timers_.size() >= kMaxTimers) {
    full_.warn(fmt::format("timer FIFO: {} timers set already; ignored scope '{}' of pid {}",
                           kMaxTimers, request.scope, request.pid));
    return;
  }
  timers_[key] = request;
  arm();
}

void FileTimerServer::arm() {
  if (ticking_ || timers_.empty()) return;
  ticking_ = true;
  tick_.expires_after(kTick);
  tick_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec == boost::asio::error::operation_aborted || !*alive) return;
    ticking_ = false;
    check();
    arm();
  });
}

void FileTimerServer::check() {
  const double now = unix_now();
  // Per worker, its earliest expired timer with a signal; a worker that is gone loses its timers.
  std::map<int, const TimerRequest*> reap;
  std::vector<std::pair<int, std::string>> done;
  for (const auto& [key, t] : timers_) {
    if (!is_worker_(t.pid)) {
      done.push_back(key);
      continue;
    }
    if (t.expiration_time > now) continue;
    done.push_back(key);
    if (t.signal <= 0) {
      spdlog::warn("timer '{}' of worker pid {} expired; it asked for no signal", t.scope, t.pid);
      continue;
    }
    auto& first = reap[t.pid];
    if (first == nullptr || t.expiration_time < first->expiration_time) first = &t;
  }
  std::vector<ExpiredTimer> expired;
  for (const auto& [pid, t] : reap) {
    expired.push_back(
        {pid, t->scope, t->signal,
         std::chrono::milliseconds(static_cast<long long>((now - t->expiration_time) * 1000))});
  }
  for (const auto& key : done) timers_.erase(key);
  for (auto it = timers_.begin(); it != timers_.end();) {
    it = reap.contains(it->first.first) ? timers_.erase(it) : std::next(it);
  }
  for (const auto& e : expired) {
    spdlog::warn("timer '{}' of worker pid {} expired {:.3f} s ago: sending {}", e.scope, e.pid,
                 e.overstay.count() / 1000.0, signal_name(e.signal));
    expire_(e);
  }
}

}  // namespace ddprun::agent
