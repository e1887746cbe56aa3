#pragma once
// One client connection of the store server: reads and decodes requests, applies them to the
// KeyValueStore, and writes replies. Replies produced while one read's batch of requests is handled
// go out in one write. Reads go into the server's shared buffer once the socket is readable, so an
// idle connection holds no read buffer, only the few bytes of a scalar split across reads. With
// TLS, the same loop reads ciphertext and a TlsChannel turns it into requests (and replies back).
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/store/key_value_store.hpp"
#include "output_queue.hpp"
#include "server_state.hpp"
#include "tls_channel.hpp"

namespace ddprun::store {

class StoreConnection final : public StorePeer,
                              public std::enable_shared_from_this<StoreConnection> {
 public:
  StoreConnection(std::shared_ptr<StoreServer::State> state, boost::asio::ip::tcp::socket socket);

  void start();
  void deliver(std::string_view bytes) override;
  // Idempotent. A non-empty reason is logged as the cause.
  void close(const std::string& reason);
  // Bytes this connection holds: its partial request, queued replies, input held back.
  size_t held_bytes() const { return accounted_; }
  // Closes the connection soon (not from inside a store operation), for the memory budget.
  void evict(std::string reason);

 private:
  using Clock = std::chrono::steady_clock;

  // Replies queued beyond this stop the reading of requests until the client has read them:
  // bounded work and memory per connection per turn of the loop.
  static constexpr size_t kBacklog = 1 << 20;
  // Socket reads (of the server's 256 KiB buffer) per turn of the loop before others get theirs.
  static constexpr int kReadsPerTurn = 16;
  // Bytes handed to the socket per write.
  static constexpr size_t kWriteSlice = 4 << 20;
  // Reply bytes encrypted per write, with TLS (the ciphertext is a copy).
  static constexpr size_t kTlsWriteSlice = 256 << 10;

  boost::asio::awaitable<void> read_loop();
  // Reads what the socket holds (decrypted, with TLS) into `out`, without blocking.
  size_t receive(char* out, size_t capacity, boost::system::error_code& ec);
  // Sends the reply `reason` came with, if any, and then closes: nothing more is read.
  void refuse(std::string reason);
  // Parses and handles requests from `in` until it is used up or replies back up; keeps what is
  // left (a partial scalar, or the unread requests while backed up).
  void process(std::string_view in);
  void after_batch();
  bool backlogged() const;
  // Brings this connection's share of the server's buffered bytes up to date; over the budget,
  // the largest holder is evicted.
  void account();
  // Applies one request; false when the connection must close (store_requests.cpp). One function
  // per family of operations, each adding its reply to reply_.
  bool handle(wire::Request& req);
  bool handle_session(const wire::Request& req);
  // AUTH_BEGIN and AUTH_PROVE (store_auth.cpp).
  bool handle_auth(const wire::Request& req);
  // Whether an authenticated connection's request stays within its scope.
  bool in_scope(const wire::Request& req) const;
  void handle_write(wire::Request& req);
  bool handle_read(const wire::Request& req);
  void handle_wait(const wire::Request& req);
  void handle_queue(wire::Request& req);
  // Moves the reply built so far to the output, ahead of a value appended by reference.
  void queue_reply();
  void flush();
  void flush_tls();
  void after_write(size_t bytes);
  bool handshaking() const;
  // Ciphertext received and not yet decrypted: a part of a record, or records not read yet.
  bool record_pending() const;
  void arm_timer();
  std::optional<Clock::time_point> next_deadline() const;

  std::shared_ptr<StoreServer::State> state_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  std::string peer_name_;
  wire::RequestParser parser_;
  char carry_[8] = {};
  size_t carry_size_ = 0;
  OutputQueue out_;
  std::string reply_;                  // the reply being built by handle()
  std::string held_input_;             // requests read but not handled while replies back up
  boost::asio::steady_timer drained_;  // never expires: cancelled once replies no longer back up
  std::unique_ptr<TlsChannel> tls_;    // with ServerOptions::tls
  std::string ciphertext_out_;         // with TLS: the bytes being written
  std::optional<Clock::time_point> backlogged_since_;
  size_t accounted_ = 0;
  bool writing_ = false;
  bool batching_ = false;
  bool closed_ = false;
  bool closing_ = false;
  bool watch_only_ = false;
  bool timer_armed_ = false;
  uint64_t timer_generation_ = 0;  // the wait that counts: earlier ones were superseded
  // Where the connection is in authenticating, when the server has a secret.
  enum class Auth : uint8_t { kNotNeeded, kExpected, kChallenged, kDone };
  Auth auth_;
  std::string scope_;  // once kDone: the key prefix it may use ("" every key)
  std::string client_nonce_;
  std::string server_nonce_;
  std::string refusal_;  // why the connection closes once its last reply is written
  Clock::time_point accepted_;
  std::chrono::milliseconds keepalive_{0};
  Clock::time_point last_rx_;
  std::optional<Clock::time_point> request_since_;  // when the unfinished request began
};

}  // namespace ddprun::store
