#include "ddprun/store/store_watch.hpp"

#include <fmt/format.h>

#include "blocking_run.hpp"
#include "client_greeting.hpp"
#include "client_socket.hpp"
#include "ddprun/store/errors.hpp"

namespace ddprun::store {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

AsyncStoreWatch::AsyncStoreWatch(asio::any_io_executor ex, ClientOptions options)
    : socket_(std::make_unique<ClientSocket>(ex, options.tls)), options_(std::move(options)) {}

AsyncStoreWatch::~AsyncStoreWatch() = default;

void AsyncStoreWatch::close() { socket_->close(); }

asio::awaitable<std::unique_ptr<AsyncStoreWatch>> AsyncStoreWatch::connect(asio::any_io_executor ex,
                                                                           std::string host,
                                                                           uint16_t port,
                                                                           ClientOptions options) {
  std::unique_ptr<AsyncStoreWatch> w(new AsyncStoreWatch(ex, std::move(options)));
  ClientSocket& socket = *w->socket_;
  const std::optional<Credential>& credential = w->options_.credential;
  co_await socket.open(
      host, port, Clock::now() + w->options_.timeout,
      [&socket, &credential]() -> asio::awaitable<void> { co_await greet(socket, credential); });
  co_return w;
}

asio::awaitable<WatchEventRecord> AsyncStoreWatch::read_frame(Ms first_byte_timeout) {
  // Timing out before a frame starts leaves the connection in step; in the middle of one, it does
  // not.
  socket_->set_deadline(Clock::now() + first_byte_timeout);
  const uint8_t event = co_await socket_->read_u8();
  socket_->set_deadline(Clock::now() + options_.timeout);
  WatchEventRecord r;
  try {
    if (event > static_cast<uint8_t>(wire::WatchEvent::kExisting)) {
      throw StoreConnectionError(fmt::format("unknown watch event {}", event));
    }
    r.event = static_cast<wire::WatchEvent>(event);
    r.key = co_await socket_->read_bytes(options_.max_value_bytes);
    r.old_value = co_await socket_->read_bytes(options_.max_value_bytes);
    r.new_value = co_await socket_->read_bytes(options_.max_value_bytes);
  } catch (...) {
    socket_->close();
    throw;
  }
  if (r.key.starts_with(options_.key_prefix)) r.key.erase(0, options_.key_prefix.size());
  co_return r;
}

asio::awaitable<std::vector<WatchEventRecord>> AsyncStoreWatch::add(wire::WatchMode mode,
                                                                    std::string_view key) {
  std::vector<std::pair<wire::WatchMode, std::string>> one;
  one.emplace_back(mode, std::string(key));
  co_return co_await add_all(std::move(one));
}

asio::awaitable<std::vector<WatchEventRecord>> AsyncStoreWatch::add_all(
    std::vector<std::pair<wire::WatchMode, std::string>> watches) {
  wbuf_.clear();
  for (const auto& [mode, key] : watches) {
    wire::Request r;
    r.op = wire::Op::kWatch;
    r.mode = static_cast<uint8_t>(mode);
    r.key = options_.key_prefix + key;
    wire::encode_request(r, wire::Dialect::kModern, wbuf_);
  }
  std::vector<WatchEventRecord> snapshot;
  if (watches.empty()) co_return snapshot;
  socket_->set_deadline(Clock::now() + options_.timeout);
  co_await socket_->write(wbuf_);
  // The server answers the requests in order, each with its snapshot and then REGISTERED.
  for (size_t registered = 0; registered < watches.size();) {
    WatchEventRecord e = co_await read_frame(options_.timeout);
    if (e.event == wire::WatchEvent::kRegistered) {
      ++registered;
    } else if (e.event == wire::WatchEvent::kExisting) {
      snapshot.push_back(std::move(e));
    } else {
      pending_.push_back(std::move(e));  // live events of earlier watches
    }
  }
  co_return snapshot;
}

asio::awaitable<WatchEventRecord> AsyncStoreWatch::next(std::optional<Ms> timeout) {
  if (!pending_.empty()) {
    WatchEventRecord e = std::move(pending_.front());
    pending_.pop_front();
    co_return e;
  }
  co_return co_await read_frame(timeout.value_or(options_.timeout));
}

StoreWatch::StoreWatch(const std::string& host, uint16_t port, ClientOptions options)
    : watch_(run_blocking(
          io_, AsyncStoreWatch::connect(io_.get_executor(), host, port, std::move(options)))) {}
StoreWatch::~StoreWatch() = default;
std::vector<WatchEventRecord> StoreWatch::add(wire::WatchMode mode, std::string_view key) {
  return run_blocking(io_, watch_->add(mode, key));
}
WatchEventRecord StoreWatch::next(std::optional<Ms> timeout) {
  return run_blocking(io_, watch_->next(timeout));
}

}  // namespace ddprun::store
