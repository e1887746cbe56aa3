#include "ddprun/store/async_store_client.hpp"

#include <exception>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "client_greeting.hpp"
#include "client_socket.hpp"
#include "ddprun/store/errors.hpp"

namespace ddprun::store {
namespace asio = boost::asio;
using wire::Request;
using Clock = std::chrono::steady_clock;

// Marks the client busy for one operation and sets its deadline. An operation that sent bytes but
// does not reach done() (an exception in the middle of a reply) closes the connection: the stream
// position is lost.
class AsyncStoreClient::Op {
 public:
  Op(AsyncStoreClient& c, Ms timeout) : c_(c) {
    if (c.busy_) throw std::logic_error("AsyncStoreClient: one operation at a time");
    c.busy_ = true;
    c.sent_ = false;
    c.socket_->set_deadline(Clock::now() + timeout);
  }
  explicit Op(AsyncStoreClient& c) : Op(c, c.options_.timeout) {}
  ~Op() {
    c_.busy_ = false;
    if (!done_ && c_.sent_) c_.socket_->close();
  }
  void done() { done_ = true; }

 private:
  AsyncStoreClient& c_;
  bool done_ = false;
};

AsyncStoreClient::AsyncStoreClient(asio::any_io_executor ex, std::string host, uint16_t port,
                                   ClientOptions options)
    : socket_(std::make_unique<ClientSocket>(ex, options.tls)),
      host_(std::move(host)),
      port_(port),
      options_(std::move(options)) {}

AsyncStoreClient::~AsyncStoreClient() = default;

void AsyncStoreClient::close() { socket_->close(); }

asio::awaitable<std::unique_ptr<AsyncStoreClient>> AsyncStoreClient::connect(
    asio::any_io_executor ex, std::string host, uint16_t port, ClientOptions options) {
  if (options.dialect == wire::Dialect::kUnknown) {
    throw std::invalid_argument("AsyncStoreClient needs a dialect");
  }
  std::unique_ptr<AsyncStoreClient> c(
      new AsyncStoreClient(ex, std::move(host), port, std::move(options)));
  co_await c->open();
  co_return c;
}

asio::awaitable<void> AsyncStoreClient::open() {
  const bool modern = options_.dialect == wire::Dialect::kModern;
  socket_->set_waiting(options_.waiting);
  co_await socket_->open(host_, port_, Clock::now() + options_.timeout,
                         [this, modern]() -> asio::awaitable<void> {
                           if (modern) co_await greet(*socket_, options_.credential);
                         });
}

std::string AsyncStoreClient::full_key(std::string_view key) const {
  std::string k;
  k.reserve(options_.key_prefix.size() + key.size());
  k.append(options_.key_prefix).append(key);
  return k;
}

Request AsyncStoreClient::request(wire::Op op, std::string_view key) const {
  Request r;
  r.op = op;
  if (!key.empty()) r.key = full_key(key);
  return r;
}

asio::awaitable<void> AsyncStoreClient::send(const Request& req) {
  wbuf_.clear();
  wire::encode_request(req, options_.dialect, wbuf_);
  sent_ = true;
  co_await socket_->write(wbuf_);
}

asio::awaitable<void> AsyncStoreClient::write_only(wire::Op which, std::string_view key,
                                                   std::string_view value) {
  Op op(*this);
  Request r = request(which, key);
  r.value = value;
  co_await send(r);
  op.done();
}

asio::awaitable<int64_t> AsyncStoreClient::request_i64(const Request& req) {
  Op op(*this);
  co_await send(req);
  const int64_t v = co_await socket_->read_i64();
  op.done();
  co_return v;
}

asio::awaitable<void> AsyncStoreClient::await_stop_waiting(std::string what, Ms timeout) {
  socket_->set_deadline(Clock::now() + timeout);
  bool timed_out = false;
  try {
    const uint8_t reply = co_await socket_->read_u8();
    if (reply != wire::kStopWaiting) {
      throw StoreConnectionError(fmt::format("unexpected reply {} to {}", reply, what));
    }
  } catch (const StoreTimeout&) {
    timed_out = true;
  }
  if (!timed_out) co_return;
  const auto message = fmt::format("{} timed out after {} ms", what, timeout.count());
  socket_->set_deadline(Clock::now() + options_.timeout);
  if (options_.dialect == wire::Dialect::kLegacy) {
    // The legacy protocol cannot cancel a wait; a fresh connection is the only clean state.
    socket_->close();
    co_await open();
    throw StoreTimeout(message);
  }
  std::exception_ptr cancel_error;
  try {
    co_await send(request(wire::Op::kCancelWait));
    uint8_t reply = co_await socket_->read_u8();
    if (reply == wire::kStopWaiting) reply = co_await socket_->read_u8();  // raced with the wake-up
    if (reply != wire::kWaitCanceled) {
      throw StoreConnectionError(fmt::format("unexpected reply {} to CANCEL_WAIT", reply));
    }
  } catch (...) {
    cancel_error = std::current_exception();
  }
  if (cancel_error) {
    socket_->close();
    std::rethrow_exception(cancel_error);
  }
  throw StoreTimeout(message);
}

asio::awaitable<void> AsyncStoreClient::set(std::string_view key, std::string_view value) {
  co_await write_only(wire::Op::kSet, key, value);
}

asio::awaitable<std::string> AsyncStoreClient::get(std::string_view key) {
  // (A named vector: g++ 12 miscompiles a braced list passed inside a coroutine.)
  const std::vector<std::string> keys(1, std::string(key));
  co_await wait(keys);
  Op op(*this);
  co_await send(request(wire::Op::kGet, key));
  std::string v = co_await socket_->read_bytes(options_.max_value_bytes);
  op.done();
  co_return v;
}

asio::awaitable<std::string> AsyncStoreClient::compare_set(std::string_view key,
                                                           std::string_view expected,
                                                           std::string_view desired) {
  co_return co_await compare_set_as(wire::Op::kCompareSet, key, expected, desired);
}

asio::awaitable<std::string> AsyncStoreClient::compare_set_owned(std::string_view key,
                                                                 std::string_view expected,
                                                                 std::string_view desired) {
  co_return co_await compare_set_as(wire::Op::kCompareSetOwned, key, expected, desired);
}

asio::awaitable<std::string> AsyncStoreClient::compare_set_as(wire::Op kind, std::string_view key,
                                                              std::string_view expected,
                                                              std::string_view desired) {
  Op op(*this);
  Request r = request(kind, key);
  r.value = expected;
  r.desired = desired;
  co_await send(r);
  std::string v = co_await socket_->read_bytes(options_.max_value_bytes);
  op.done();
  co_return v;
}

asio::awaitable<int64_t> AsyncStoreClient::add(std::string_view key, int64_t delta) {
  Request r = request(wire::Op::kAdd, key);
  r.number = delta;
  co_return co_await request_i64(r);
}

asio::awaitable<bool> AsyncStoreClient::check(const std::vector<std::string>& keys) {
  Op op(*this);
  Request r = request(wire::Op::kCheck);
  for (const auto& k : keys) r.keys.push_back(full_key(k));
  co_await send(r);
  const uint8_t v = co_await socket_->read_u8();
  op.done();
  co_return v == wire::kCheckReady;
}

asio::awaitable<void> AsyncStoreClient::wait(const std::vector<std::string>& keys,
                                             std::optional<Ms> timeout) {
  Op op(*this);
  Request r = request(wire::Op::kWait);
  for (const auto& k : keys) r.keys.push_back(full_key(k));
  co_await send(r);
  std::exception_ptr error;
  try {
    co_await await_stop_waiting(fmt::format("wait for keys {}", keys),
                                timeout.value_or(options_.timeout));
  } catch (const StoreTimeout&) {
    // The wait was cancelled cleanly: the connection stays usable.
    error = std::current_exception();
  }
  op.done();
  if (error) std::rethrow_exception(error);
}

asio::awaitable<int64_t> AsyncStoreClient::num_keys() {
  co_return co_await request_i64(request(wire::Op::kGetNumKeys));
}

asio::awaitable<bool> AsyncStoreClient::delete_key(std::string_view key) {
  co_return co_await request_i64(request(wire::Op::kDeleteKey, key)) == 1;
}

asio::awaitable<void> AsyncStoreClient::append(std::string_view key, std::string_view value) {
  co_await write_only(wire::Op::kAppend, key, value);
}

asio::awaitable<std::vector<std::string>> AsyncStoreClient::multi_get(
    const std::vector<std::string>& keys) {
  Op op(*this);
  Request r = request(wire::Op::kMultiGet);
  for (const auto& k : keys) r.keys.push_back(full_key(k));
  co_await send(r);
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    out.push_back(co_await socket_->read_bytes(options_.max_value_bytes));
  }
  op.done();
  co_return out;
}

asio::awaitable<void> AsyncStoreClient::multi_set(const std::vector<std::string>& keys,
                                                  const std::vector<std::string>& values) {
  Op op(*this);
  Request r = request(wire::Op::kMultiSet);
  for (const auto& k : keys) r.keys.push_back(full_key(k));
  r.values = values;
  co_await send(r);
  op.done();
}

asio::awaitable<uint32_t> AsyncStoreClient::ping(uint32_t nonce, std::optional<Ms> timeout) {
  Op op(*this, timeout.value_or(options_.timeout));
  Request r = request(wire::Op::kPing);
  r.u32 = nonce;
  co_await send(r);
  const uint32_t v = co_await socket_->read_u32();
  op.done();
  co_return v;
}

asio::awaitable<void> AsyncStoreClient::queue_push(std::string_view key, std::string_view value) {
  co_await write_only(wire::Op::kQueuePush, key, value);
}

asio::awaitable<std::optional<std::string>> AsyncStoreClient::queue_pop(std::string_view key) {
  Op op(*this);
  co_await send(request(wire::Op::kQueuePop, key));
  std::optional<std::string> v;
  if (co_await socket_->read_i64() > 0) v = co_await socket_->read_bytes(options_.max_value_bytes);
  op.done();
  co_return v;
}

asio::awaitable<int64_t> AsyncStoreClient::queue_len(std::string_view key) {
  co_return co_await request_i64(request(wire::Op::kQueueLen, key));
}

asio::awaitable<std::vector<std::string>> AsyncStoreClient::list_keys() {
  Op op(*this);
  co_await send(request(wire::Op::kListKeys));
  const int64_t n = co_await socket_->read_i64();
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) {
    std::string k = co_await socket_->read_bytes(options_.max_value_bytes);
    if (k.starts_with(options_.key_prefix)) out.push_back(k.substr(options_.key_prefix.size()));
  }
  op.done();
  co_return out;
}

asio::awaitable<std::vector<std::pair<std::string, std::string>>> AsyncStoreClient::get_prefix(
    std::string_view prefix) {
  Op op(*this);
  co_await send(request(wire::Op::kGetPrefix, prefix));
  const int64_t n = co_await socket_->read_i64();
  std::vector<std::pair<std::string, std::string>> out;
  for (int64_t i = 0; i < n; ++i) {
    std::string k = co_await socket_->read_bytes(options_.max_value_bytes);
    std::string v = co_await socket_->read_bytes(options_.max_value_bytes);
    if (k.starts_with(options_.key_prefix)) {
      out.emplace_back(k.substr(options_.key_prefix.size()), std::move(v));
    }
  }
  op.done();
  co_return out;
}

asio::awaitable<void> AsyncStoreClient::barrier(std::string_view key, int64_t world_size,
                                                std::optional<Ms> timeout) {
  Op op(*this);
  Request r = request(wire::Op::kBarrier, key);
  r.number = world_size;
  co_await send(r);
  std::exception_ptr error;
  try {
    co_await await_stop_waiting(fmt::format("barrier '{}' of {}", key, world_size),
                                timeout.value_or(options_.timeout));
  } catch (const StoreTimeout&) {
    error = std::current_exception();
  }
  op.done();
  if (error) std::rethrow_exception(error);
}

asio::awaitable<void> AsyncStoreClient::set_owned(std::string_view key, std::string_view value) {
  co_await write_only(wire::Op::kSetOwned, key, value);
}

asio::awaitable<void> AsyncStoreClient::keepalive(Ms timeout) {
  Op op(*this);
  Request r = request(wire::Op::kKeepAlive);
  r.number = timeout.count();
  co_await send(r);
  const uint8_t v = co_await socket_->read_u8();
  if (v != wire::kKeepAliveOk) throw StoreConnectionError("unexpected reply to KEEPALIVE");
  op.done();
}

asio::awaitable<ServerInfo> AsyncStoreClient::server_info() {
  Op op(*this);
  co_await send(request(wire::Op::kServerInfo));
  ServerInfo info;
  info.instance = static_cast<uint64_t>(co_await socket_->read_i64());
  const uint8_t flags = co_await socket_->read_u8();
  info.in_agent = (flags & wire::kServerInAgent) != 0;
  info.needs_auth = (flags & wire::kServerNeedsAuth) != 0;
  info.tells_time = (flags & wire::kServerTellsTime) != 0;
  op.done();
  co_return info;
}

asio::awaitable<int64_t> AsyncStoreClient::server_time() {
  Op op(*this);
  co_await send(request(wire::Op::kServerTime));
  const int64_t micros = co_await socket_->read_i64();
  op.done();
  co_return micros;
}

}  // namespace ddprun::store
