#pragma once
// One client connection of the store server: reads and decodes requests, applies them to the
// KeyValueStore, and writes replies. Replies produced while one read's batch of requests is handled
// go out in one write. Reads go into the server's shared buffer once the socket is readable, so an
// idle connection holds no read buffer, only the few bytes of a scalar split across reads.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddprun/rendezvous/key_value_store.hpp"
#include "server_state.hpp"

namespace ddprun::rendezvous {

class StoreConnection final : public StorePeer,
                              public std::enable_shared_from_this<StoreConnection> {
 public:
  StoreConnection(std::shared_ptr<StoreServer::State> state, boost::asio::ip::tcp::socket socket);

  void start();
  void deliver(std::string_view bytes) override;
  // Idempotent. A non-empty reason is logged as the cause.
  void close(const std::string& reason);

 private:
  using Clock = std::chrono::steady_clock;

  boost::asio::awaitable<void> read_loop();
  // Applies one request; false when the connection must close.
  bool handle(wire::Request& req);
  void flush();
  void arm_timer();
  std::optional<Clock::time_point> next_deadline() const;

  std::shared_ptr<StoreServer::State> state_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  std::string peer_name_;
  wire::RequestParser parser_;
  char carry_[8] = {};
  size_t carry_size_ = 0;
  std::string out_;
  std::string inflight_;
  bool writing_ = false;
  bool batching_ = false;
  bool closed_ = false;
  bool closing_ = false;
  bool watch_only_ = false;
  bool timer_armed_ = false;
  std::chrono::milliseconds keepalive_{0};
  Clock::time_point last_rx_;
  std::optional<Clock::time_point> request_since_;  // when the unfinished request began
};

}  // namespace ddprun::rendezvous
