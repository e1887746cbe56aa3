#pragma once
// A client of etcd's v3 HTTP/JSON gateway (the grpc-gateway every etcd since 3.4 serves beside gRPC
// on its client port): unary calls, and the watch stream. Its habits, which the callers rely on:
// keys and values are base64, int64 fields are JSON strings, fields with default values (false, 0,
// "") are left out, and a stream is one {"result": ...} object per line of a chunked body.
//
// Failover: a call goes to the current member; when the connection fails, or the member answers
// that it cannot serve (no leader, leader changed, a stopped member), it moves on to the next
// endpoint and tries again, until the call's deadline. Requests are idempotent at the level the
// rendezvous uses them (puts, compare-and-set transactions, ranges, lease keep-alives), so a retry
// after an unknown outcome is safe.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/job_store/etcd_endpoint.hpp"

namespace ddprun::rendezvous::etcd {

using Clock = std::chrono::steady_clock;

using Endpoint = EtcdEndpoint;

std::string base64_encode(const std::string& bytes);
// Throws std::invalid_argument on text that is not base64.
std::string base64_decode(const std::string& text);
// The smallest key above every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(const std::string& prefix);
// An int64 field as the gateway writes it (a string; absent means 0).
int64_t int_field(const nlohmann::json& j, const char* name);

class Connection;
class Login;

class Client {
 public:
  // `attempt_timeout` bounds one try on one member, so that a silent member is left for the next.
  // `tls`: null for plain HTTP. `login`: the user every call is made as (null: none); a call whose
  // token etcd no longer takes logs in again and is made again.
  Client(boost::asio::any_io_executor ex, std::vector<Endpoint> endpoints,
         std::chrono::milliseconds attempt_timeout, std::shared_ptr<boost::asio::ssl::context> tls,
         std::shared_ptr<Login> login = nullptr);
  ~Client();

  // POSTs `body` to `path` (e.g. "/v3/kv/put") and returns the parsed reply, failing over between
  // endpoints until `deadline`. Throws StoreConnectionError when no member could serve it by then
  // (with the last reason), StoreAuthError when etcd refuses the user (no login on a cluster with
  // authentication, a wrong password, a role without access to the key), StoreError for any other
  // reply that no other member would answer differently (a bad request).
  boost::asio::awaitable<nlohmann::json> call(std::string path, nlohmann::json body,
                                              Clock::time_point deadline);
  // Whether every try of the last call found its member gone (the connection refused, or reset):
  // the members are down for every client, not silent or cut off from this one, so nobody can
  // change the job meanwhile. An answer, or a member that takes a request and stays silent, is not.
  bool members_down() const { return members_down_; }
  // The member the next call goes to first (an index into the endpoints), and choosing it.
  size_t member() const { return current_; }
  void prefer(size_t member);
  // Aborts the call in progress and every later one (StoreConnectionError).
  void close();

 private:
  boost::asio::any_io_executor ex_;
  std::vector<Endpoint> endpoints_;
  std::chrono::milliseconds attempt_timeout_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  std::shared_ptr<Login> login_;
  size_t current_ = 0;
  std::unique_ptr<Connection> connection_;
  bool closed_ = false;
  bool members_down_ = false;
};

// One watch: POST /v3/watch with a create_request, then events as they come. Reconnecting is the
// caller's business (open a new stream from the revision after the last one seen).
class WatchStream {
 public:
  WatchStream(boost::asio::any_io_executor ex, std::vector<Endpoint> endpoints,
              std::shared_ptr<boost::asio::ssl::context> tls,
              std::shared_ptr<Login> login = nullptr);
  ~WatchStream();
  // Opens the watch on the first member that accepts it, trying each endpoint in turn from the one
  // after the last used, until `deadline`; returns once etcd confirmed it ("created").
  boost::asio::awaitable<void> open(std::string key, std::string range_end, int64_t start_revision,
                                    Clock::time_point deadline);
  // The next message with events (its "events" array, possibly empty for progress notices).
  // Throws StoreConnectionError when the stream breaks or is closed.
  boost::asio::awaitable<nlohmann::json> next();
  // The member the stream is open on (an index into the endpoints).
  size_t member() const { return current_; }
  // Breaks the stream (next() throws) without closing the watch, so that the caller opens it again
  // on another member: for a member that stopped answering while its stream stays silently open.
  // During open(), ends the try on the current member (open() goes on with the next).
  void drop_member();
  void close();

 private:
  boost::asio::awaitable<std::string> read_line();

  boost::asio::any_io_executor ex_;
  std::vector<Endpoint> endpoints_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  std::shared_ptr<Login> login_;
  size_t current_ = 0;
  std::unique_ptr<Connection> connection_;
  std::string lines_;
  bool closed_ = false;
};

}  // namespace ddprun::rendezvous::etcd
