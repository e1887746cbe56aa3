#include "store_connection.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "tls_alert.hpp"

namespace ddprun::store {
namespace asio = boost::asio;
using wire::Op;

namespace {

std::string describe(const asio::ip::tcp::socket& s) {
  boost::system::error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "an unknown peer";
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

}  // namespace

StoreConnection::StoreConnection(std::shared_ptr<StoreServer::State> state,
                                 asio::ip::tcp::socket socket)
    : state_(std::move(state)),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      peer_name_(describe(socket_)),
      parser_(state_->options.limits),
      drained_(socket_.get_executor(), Clock::time_point::max()),
      tls_(state_->options.tls ? std::make_unique<TlsChannel>(*state_->options.tls) : nullptr),
      auth_(state_->options.secret ? Auth::kExpected : Auth::kNotNeeded),
      accepted_(Clock::now()),
      last_rx_(accepted_) {
  parser_.handshake_only(auth_ == Auth::kExpected);
}

void StoreConnection::start() {
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  state_->connections.insert(this);
  arm_timer();  // a connection that owes a handshake owes it even when silent
  asio::co_spawn(socket_.get_executor(), read_loop(), asio::detached);
}

asio::awaitable<void> StoreConnection::read_loop() {
  auto self = shared_from_this();
  ReadBuffer& buf = state_->read_buffer;
  for (;;) {
    if (backlogged()) {
      // More replies are queued than this client has read: it is served again once it reads them.
      co_await drained_.async_wait(asio::as_tuple(asio::use_awaitable));
      if (closed_) co_return;
      if (backlogged()) continue;
      if (!held_input_.empty()) {
        const std::string input = std::move(held_input_);
        held_input_.clear();
        process(input);
        if (closed_) co_return;
        after_batch();
        continue;
      }
    }
    if (closing_) co_return;  // nothing more is read from a connection about to close
    if (tls_ && tls_->has_input()) {
      // Records already received wait in the TLS session, not the socket: read them after
      // others have had their turn.
      co_await asio::post(socket_.get_executor(), asio::use_awaitable);
    } else {
      auto [wait_ec] = co_await socket_.async_wait(asio::ip::tcp::socket::wait_read,
                                                   asio::as_tuple(asio::use_awaitable));
      if (wait_ec && !closed_ && !closing_) {
        close(wait_ec.message());
        co_return;
      }
    }
    if (closed_ || closing_) co_return;
    // Drain what the socket holds, up to kReadsPerTurn reads, unless replies back up. Nothing
    // below suspends, so the shared buffer is this connection's until the loop ends.
    for (int reads = 0; reads < kReadsPerTurn; ++reads) {
      std::memcpy(buf.data(), carry_, carry_size_);
      boost::system::error_code ec;
      const size_t n = receive(buf.data() + carry_size_, buf.size() - carry_size_, ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) {
        if (tls_ && !tls_->error().empty()) {
          refuse(fmt::format("TLS {} failed: {}", tls_->established() ? "session" : "handshake",
                             tls_->error()));
        } else if (ec != asio::error::eof) {
          close(ec.message());
        } else {
          close(parser_.idle() && carry_size_ == 0 ? "" : "closed in the middle of a request");
        }
        co_return;
      }
      last_rx_ = Clock::now();
      state_->counters.bytes_received += n;
      const size_t have = carry_size_ + n;
      carry_size_ = 0;
      process(std::string_view(buf.data(), have));
      if (closed_) co_return;
      account();
      if (closing_ || backlogged() || have < buf.size()) break;  // backed up, or drained
    }
    after_batch();
  }
}

size_t StoreConnection::receive(char* out, size_t capacity, boost::system::error_code& ec) {
  if (!tls_) return socket_.read_some(asio::buffer(out, capacity), ec);
  ReadBuffer& ciphertext = state_->tls_buffer;
  size_t got = 0;
  while (got < capacity) {
    size_t n = 0;
    const TlsChannel::Read r = tls_->read(out + got, capacity - got, n);
    if (r == TlsChannel::Read::kData) {
      got += n;
      continue;
    }
    if (r == TlsChannel::Read::kNeedInput) {
      const size_t m = socket_.read_some(asio::buffer(ciphertext.data(), ciphertext.size()), ec);
      if (ec) break;
      tls_->put_input(std::string_view(ciphertext.data(), m));
      continue;
    }
    if (r == TlsChannel::Read::kClosed) {
      ec = asio::error::eof;
    } else {
      ec = asio::error::connection_aborted;
    }
    break;
  }
  // What was decrypted goes first; the socket, or the session, says the same again next time.
  if (got > 0) ec = {};
  return got;
}

void StoreConnection::refuse(std::string reason) {
  refusal_ = std::move(reason);
  closing_ = true;
  if (tls_ && !tls_->error().empty()) out_.clear();  // (only the session's alert can still go)
  flush();
  if (!writing_) close(refusal_);
}

void StoreConnection::process(std::string_view in) {
  size_t pos = 0;
  batching_ = true;
  while (!closed_ && !closing_ && !backlogged()) {
    pos += parser_.consume(in.substr(pos));
    if (parser_.failed()) {
      if (parser_.began_tls()) {
        // A TLS client of this clear store: told so in TLS, so that it does not try again.
        out_.append(tls_alert::kProtocolVersion);
        refuse(parser_.error());
        break;
      }
      close(parser_.error());
      break;
    }
    if (!parser_.has_request()) break;
    wire::Request req = parser_.take_request();
    request_since_.reset();
    if (!handle(req)) break;
  }
  batching_ = false;
  if (closed_ || closing_) return;  // what is left goes unread
  const std::string_view rest = in.substr(pos);
  if (backlogged()) {
    held_input_.assign(rest);  // (at most one read's worth: the socket is not read meanwhile)
    return;
  }
  assert(rest.size() <= sizeof carry_);  // RequestParser leaves less than one scalar
  std::memcpy(carry_, rest.data(), rest.size());
  carry_size_ = rest.size();
  // A request under way has until partial_request_timeout after its first bytes, however it
  // trickles in.
  if (parser_.idle() && carry_size_ == 0 && !record_pending()) {
    request_since_.reset();
  } else if (!request_since_) {
    request_since_ = last_rx_;
  }
}

void StoreConnection::after_batch() {
  if (backlogged() && !backlogged_since_) backlogged_since_ = Clock::now();
  // Part of a TLS record is part of a request, whose deadline runs from its first bytes.
  if (record_pending() && !request_since_) request_since_ = last_rx_;
  flush();
  account();
  arm_timer();
}

bool StoreConnection::backlogged() const { return out_.size() > kBacklog; }

void StoreConnection::deliver(std::string_view bytes) {
  // A server that stops sends nothing more: the owned keys its closing connections drop are not
  // news to watchers (who would take their owners for gone) but the server's own end.
  if (closed_ || closing_ || state_->stopped) return;
  out_.append(bytes);
  if (out_.size() > state_->options.max_pending_output_bytes) {
    // Closing drops this peer from the store, which is iterating over its peers right now.
    closing_ = true;
    asio::post(socket_.get_executor(),
               [self = shared_from_this()] { self->close("does not read its replies"); });
    return;
  }
  if (!batching_) {
    flush();
    account();
  }
}

void StoreConnection::flush() {
  if (tls_) {
    flush_tls();
    return;
  }
  if (writing_ || out_.empty() || closed_) return;
  writing_ = true;
  // A slice at a time: the loop turns between slices, and large values go out by reference.
  asio::async_write(socket_, out_.front(kWriteSlice),
                    [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                      self->writing_ = false;
                      if (self->closed_) return;
                      if (ec) {
                        self->close(ec.message());
                        return;
                      }
                      self->out_.consume(n);
                      self->after_write(n);
                    });
}

void StoreConnection::flush_tls() {
  if (writing_ || closed_) return;
  if (tls_->established() && !out_.empty()) {
    // Replies are encrypted as they go out (a copy), so the queue lets go of them at once.
    size_t taken = 0;
    for (const asio::const_buffer& b : out_.front(kTlsWriteSlice)) {
      if (!tls_->write(std::string_view(static_cast<const char*>(b.data()), b.size()))) {
        close(fmt::format("TLS session failed: {}", tls_->error()));
        return;
      }
      taken += b.size();
    }
    out_.consume(taken);
  }
  tls_->take_output(ciphertext_out_);
  if (ciphertext_out_.empty()) return;
  writing_ = true;
  asio::async_write(socket_, asio::buffer(ciphertext_out_),
                    [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                      self->writing_ = false;
                      if (self->closed_) return;
                      if (ec) {
                        self->close(ec.message());
                        return;
                      }
                      self->ciphertext_out_.clear();
                      self->after_write(n);
                    });
}

void StoreConnection::after_write(size_t bytes) {
  state_->counters.bytes_sent += bytes;
  if (!refusal_.empty() && out_.empty() && (!tls_ || tls_->output_size() == 0)) {
    close(refusal_);
    return;
  }
  if (!backlogged()) {
    backlogged_since_.reset();
    drained_.cancel();
  }
  flush();
  account();
}

void StoreConnection::account() {
  if (closed_) return;
  const size_t held = parser_.held_bytes() + out_.size() + held_input_.size() +
                      ciphertext_out_.size() + (tls_ ? tls_->output_size() : 0);
  state_->buffered_bytes += held;
  state_->buffered_bytes -= accounted_;
  accounted_ = held;
  if (state_->buffered_bytes > state_->options.max_buffered_bytes) state_->enforce_budget();
}

std::optional<StoreConnection::Clock::time_point> StoreConnection::next_deadline() const {
  // Backed up, the client is not read (its pings wait in the socket): it has the partial-request
  // timeout to read its replies.
  if (backlogged_since_) return *backlogged_since_ + state_->options.partial_request_timeout;
  std::optional<Clock::time_point> deadline;
  if (auth_ == Auth::kExpected || auth_ == Auth::kChallenged || handshaking()) {
    deadline = accepted_ + state_->options.auth_timeout;
  }
  if (keepalive_.count() > 0) {
    deadline = deadline ? std::min(*deadline, last_rx_ + keepalive_) : last_rx_ + keepalive_;
  }
  if (request_since_) {
    const auto stall = *request_since_ + state_->options.partial_request_timeout;
    deadline = deadline ? std::min(*deadline, stall) : stall;
  }
  return deadline;
}

bool StoreConnection::handshaking() const { return tls_ && !tls_->established(); }

bool StoreConnection::record_pending() const { return tls_ && tls_->holds_input(); }

void StoreConnection::arm_timer() {
  if (closed_) return;
  const auto deadline = next_deadline();
  if (!deadline) return;
  // The deadline moves with every read, mostly later; rather than re-arming per read, the timer
  // re-checks when it fires and sleeps again until the current deadline. An earlier deadline (a
  // request begun while the handshake's was armed) re-arms it at once.
  if (timer_armed_ && timer_.expiry() <= *deadline) return;
  timer_armed_ = true;
  const uint64_t generation = ++timer_generation_;
  timer_.expires_at(*deadline);  // a wait under way completes, and is ignored as superseded
  timer_.async_wait([self = shared_from_this(), generation](boost::system::error_code ec) {
    if (generation != self->timer_generation_) return;
    self->timer_armed_ = false;
    if (ec || self->closed_) return;
    const auto deadline = self->next_deadline();
    if (!deadline) return;
    const auto now = Clock::now();
    if (now < *deadline) {
      self->arm_timer();
      return;
    }
    // Bytes waiting in the socket mean the client kept its keep-alive and this server was slow
    // to read them (starved of CPU): not the client's fault. Not for a backed-up connection, which
    // is deliberately not read.
    boost::system::error_code avail_ec;
    if (!self->backlogged_since_ && self->keepalive_.count() > 0 &&
        now >= self->last_rx_ + self->keepalive_ && self->socket_.available(avail_ec) > 0 &&
        !avail_ec) {
      self->last_rx_ = now;
      self->arm_timer();
      return;
    }
    if (self->auth_ == Auth::kExpected || self->auth_ == Auth::kChallenged || self->handshaking()) {
      if (now >= self->accepted_ + self->state_->options.auth_timeout) {
        self->close(fmt::format("did not {} within {} ms",
                                self->handshaking() ? "complete its TLS handshake" : "authenticate",
                                self->state_->options.auth_timeout.count()));
        return;
      }
    }
    if (self->backlogged_since_) {
      self->close(fmt::format("did not read its replies ({} bytes queued) within {} ms",
                              self->out_.size(),
                              self->state_->options.partial_request_timeout.count()));
    } else if (self->keepalive_.count() > 0 && now >= self->last_rx_ + self->keepalive_) {
      self->close(fmt::format("missed its keep-alive of {} ms", self->keepalive_.count()));
    } else {
      self->close(fmt::format("did not complete a request within {} ms of its first bytes",
                              self->state_->options.partial_request_timeout.count()));
    }
  });
}

void StoreConnection::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  if (!reason.empty()) {
    ++state_->counters.connections_dropped;
    state_->connection_warnings.warn(
        fmt::format("store: dropping connection from {}: {}", peer_name_, reason));
  }
  state_->store.drop_peer(*this);
  state_->connections.erase(this);
  state_->buffered_bytes -= accounted_;
  accounted_ = 0;
  boost::system::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  timer_.cancel();
  drained_.cancel();
  if (!writing_) out_.clear();  // (a write under way still points into it: it goes with this)
  held_input_.clear();
  held_input_.shrink_to_fit();
}

void StoreConnection::evict(std::string reason) {
  closing_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this(), reason = std::move(reason)] {
    self->close(reason);
    self->state_->evicting = false;
    if (self->state_->buffered_bytes > self->state_->options.max_buffered_bytes) {
      self->state_->enforce_budget();
    }
  });
}

void StoreServer::State::enforce_budget() {
  if (evicting) return;
  StoreConnection* worst = nullptr;
  for (StoreConnection* c : connections) {
    if (worst == nullptr || c->held_bytes() > worst->held_bytes()) worst = c;
  }
  if (worst == nullptr || worst->held_bytes() == 0) return;
  evicting = true;
  worst->evict(fmt::format(
      "the store's memory budget of {} MiB for buffered requests and replies is exceeded ({} MiB "
      "held): this connection holds the most, {} MiB",
      options.max_buffered_bytes >> 20, buffered_bytes >> 20, worst->held_bytes() >> 20));
}

}  // namespace ddprun::store
