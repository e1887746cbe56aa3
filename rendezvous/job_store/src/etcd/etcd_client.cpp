#include "etcd_client.hpp"

#include <array>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>

#include "ddprun/store/errors.hpp"
#include "ddprun/store/tls.hpp"
#include "etcd_connection.hpp"
#include "etcd_login.hpp"

namespace ddprun::rendezvous::etcd {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using nlohmann::json;

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// gRPC status codes the gateway reports that another member, or the same one a moment later, may
// answer differently: CANCELLED, UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED,
// UNAVAILABLE ("no leader", "leader changed", "request timed out", a stopping member).
bool transient(int code) {
  return code == 1 || code == 2 || code == 4 || code == 8 || code == 10 || code == 14;
}

// Whether a try failed because its member is not there (as opposed to silent, or answering).
bool gone(const boost::system::error_code& ec) {
  return ec == asio::error::connection_refused || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::eof ||
         ec == http::error::end_of_stream;
}

// Why a try on a member failed, in words, with a hint where the usual cause is a setting (then
// `hinted` is set).
std::string failure(const std::exception& e, bool tls, bool& hinted) {
  const auto* system = dynamic_cast<const boost::system::system_error*>(&e);
  const std::string what = system ? system->code().message() : e.what();
  const auto has = [&](const char* s) { return what.find(s) != std::string::npos; };
  hinted = true;
  if (const std::string hint = tls ? store::tls_hint(what) : ""; !hint.empty()) {
    return fmt::format("{} ({})", what, hint);
  }
  if (!tls && (has("end of stream") || has("reset by peer"))) {
    return what + " (if the member serves https, set rdzv_conf protocol=https)";
  }
  hinted = false;
  return what;
}

// What a member's answer other than a success means for the call.
struct Refusal {
  enum class Kind {
    kTransient,     // another member, or this one a moment later, may answer otherwise
    kTokenExpired,  // log in again and make the call again
    kAuth,          // the credentials or their rights: no member will answer otherwise
    kFinal,         // a reply no other member would change
  } kind;
  std::string what;
};

// `res` (its body parsed into `j`, an object where it is JSON) to `path` from `host`; `login`: the
// call's login, if any, whose token may be renewed (`may_relogin`).
Refusal refusal(const http::response<http::string_body>& res, const json& j,
                const std::string& path, const std::string& host, const Login* login,
                bool may_relogin) {
  const int code = j.is_object() ? static_cast<int>(j.value("code", 0)) : 0;
  const std::string message = j.is_object() ? j.value("message", j.value("error", std::string()))
                                            : res.body().substr(0, 200);
  std::string what = fmt::format("{} answered {} to {}: {}", host, res.result_int(), path, message);
  const auto says = [&](const char* s) { return message.find(s) != std::string::npos; };
  using Kind = Refusal::Kind;
  if (j.is_object() && transient(code)) return {Kind::kTransient, std::move(what)};
  if (!j.is_object() && res.result_int() >= 500) return {Kind::kTransient, std::move(what)};
  if (!j.is_object()) {
    return {Kind::kFinal, fmt::format("{} (is it an etcd v3 endpoint?)", what)};
  }
  if (login && says("invalid auth token") && may_relogin) return {Kind::kTokenExpired, what};
  if (says("permission denied")) {
    return {
        Kind::kAuth,
        fmt::format("{} (user '{}' may not use these keys: grant its role readwrite on the job's "
                    "prefix)",
                    what, login ? login->user() : std::string("(none)"))};
  }
  if (says("user name is empty") || says("auth token")) {
    return {Kind::kAuth, fmt::format("{} (the cluster has authentication on: give --rdzv_conf "
                                     "user=NAME,password_file=PATH)",
                                     what)};
  }
  if (says("authentication failed")) return {Kind::kAuth, std::move(what)};
  return {Kind::kFinal, std::move(what)};
}

}  // namespace

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v =
        (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    if (rest == 2) v |= uint8_t(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  std::array<int, 256> value;
  value.fill(-1);
  for (int i = 0; i < 64; ++i) value[uint8_t(kAlphabet[i])] = i;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char c : text) {
    if (c == '=') {
      ++pad;
      continue;
    }
    const int v = value[uint8_t(c)];
    if (v < 0 || pad > 0) throw std::invalid_argument("not base64: " + text);
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (pad > 2 || (text.size() % 4) != 0) throw std::invalid_argument("not base64: " + text);
  return out;
}

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xFF) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

int64_t int_field(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) return 0;
  return it->is_string() ? std::stoll(it->get<std::string>()) : it->get<int64_t>();
}

Client::Client(asio::any_io_executor ex, std::vector<Endpoint> endpoints,
               std::chrono::milliseconds attempt_timeout, std::shared_ptr<asio::ssl::context> tls,
               std::shared_ptr<Login> login)
    : ex_(ex),
      endpoints_(std::move(endpoints)),
      attempt_timeout_(attempt_timeout),
      tls_(std::move(tls)),
      login_(std::move(login)) {
  if (endpoints_.empty()) throw std::invalid_argument("no etcd endpoint");
}

Client::~Client() = default;

void Client::close() {
  closed_ = true;
  if (connection_) connection_->close();
}

void Client::prefer(size_t member) {
  if (member == current_ || member >= endpoints_.size()) return;
  if (connection_) connection_->close();
  connection_.reset();
  current_ = member;
}

asio::awaitable<json> Client::call(std::string path, json body, Clock::time_point deadline) {
  const std::string payload = body.dump();
  std::string last_error = "no member answered";
  // A failure that points at a setting is worth more than the timeouts of later tries (a loaded
  // machine): it is the one reported.
  std::string hinted_error;
  members_down_ = true;
  // Logging in again after etcd let the token expire: a few times per call (another caller may
  // have logged in meanwhile), not without end against a cluster that refuses every token.
  constexpr int kRelogins = 3;
  int relogins = 0;
  asio::steady_timer pause(ex_);
  for (size_t attempt = 0;; ++attempt) {
    if (closed_) throw store::StoreConnectionError("the etcd client was closed");
    const auto now = Clock::now();
    if (now >= deadline) {
      throw store::StoreConnectionError(
          fmt::format("etcd is unreachable: {}", hinted_error.empty() ? last_error : hinted_error));
    }
    const auto attempt_deadline = std::min(deadline, now + attempt_timeout_);
    std::optional<Refusal> refused;  // an answer no other member would change
    try {
      std::string token;
      if (login_) token = co_await login_->token(attempt_deadline);
      if (!connection_) {
        auto c = std::make_unique<Connection>(ex_, tls_);
        co_await c->connect(endpoints_[current_], attempt_deadline);
        connection_ = std::move(c);
      }
      co_await connection_->send(path, payload, attempt_deadline, token);
      const auto res = co_await connection_->read_response(attempt_deadline);
      const json j = json::parse(res.body(), nullptr, false);
      if (res.result() == http::status::ok && j.is_object()) co_return j;
      members_down_ = false;
      Refusal r = refusal(res, j, path, connection_->host(), login_.get(), relogins < kRelogins);
      switch (r.kind) {
        case Refusal::Kind::kTransient:
          last_error = std::move(r.what);
          break;
        case Refusal::Kind::kTokenExpired:
          login_->expired(token);  // it expired: log in again and make the call again, here
          ++relogins;
          continue;
        case Refusal::Kind::kAuth:
        case Refusal::Kind::kFinal:
          refused = std::move(r);
          break;
      }
    } catch (const store::StoreAuthError&) {
      throw;
    } catch (const std::exception& e) {
      bool hinted = false;
      last_error = fmt::format("{}: {}", describe(endpoints_[current_]),
                               failure(e, tls_ != nullptr, hinted));
      if (hinted) hinted_error = last_error;
      const auto* system = dynamic_cast<const boost::system::system_error*>(&e);
      if (!system || !gone(system->code())) members_down_ = false;
    }
    if (refused && refused->kind == Refusal::Kind::kAuth)
      throw store::StoreAuthError(refused->what);
    if (refused) throw store::StoreError(refused->what);
    // Move on to the next member; after trying them all, pause before the next round of tries.
    if (connection_) connection_->close();
    connection_.reset();
    current_ = (current_ + 1) % endpoints_.size();
    if ((attempt + 1) % endpoints_.size() == 0) {
      pause.expires_at(std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
      co_await pause.async_wait(asio::as_tuple(use_awaitable));
    }
  }
}

WatchStream::WatchStream(asio::any_io_executor ex, std::vector<Endpoint> endpoints,
                         std::shared_ptr<asio::ssl::context> tls, std::shared_ptr<Login> login)
    : ex_(ex), endpoints_(std::move(endpoints)), tls_(std::move(tls)), login_(std::move(login)) {}

WatchStream::~WatchStream() = default;

void WatchStream::close() {
  closed_ = true;
  if (connection_) connection_->close();
}

void WatchStream::drop_member() {
  if (connection_) connection_->close();
}

asio::awaitable<void> WatchStream::open(std::string key, std::string range_end,
                                        int64_t start_revision, Clock::time_point deadline) {
  json create;
  create["key"] = base64_encode(key);
  create["range_end"] = base64_encode(range_end);
  create["start_revision"] = std::to_string(start_revision);
  json body;
  body["create_request"] = create;
  const std::string payload = body.dump();
  std::string last_error = "no member answered";
  asio::steady_timer pause(ex_);
  for (size_t attempt = 0;; ++attempt) {
    if (closed_) throw store::StoreConnectionError("the etcd watch was closed");
    if (Clock::now() >= deadline) {
      throw store::StoreConnectionError(
          fmt::format("etcd is unreachable for a watch: {}", last_error));
    }
    if (connection_) connection_->close();
    connection_.reset();
    lines_.clear();
    current_ = (current_ + 1) % endpoints_.size();
    std::string token;
    try {
      if (login_) token = co_await login_->token(deadline);
      // Held in connection_ from the start, so that drop_member() and close() cut a try short.
      connection_ = std::make_unique<Connection>(ex_, tls_);
      co_await connection_->connect(endpoints_[current_], deadline);
      co_await connection_->send("/v3/watch", payload, deadline, token);
      const unsigned status = co_await connection_->read_stream_header(deadline);
      if (status != 200) throw store::StoreConnectionError(fmt::format("HTTP status {}", status));
      const json first = json::parse(co_await read_line());
      if (first.contains("error")) {
        const std::string message = first["error"].value("message", first["error"].dump());
        if (message.find("permission denied") != std::string::npos) {
          throw store::StoreAuthError(fmt::format(
              "etcd refused a watch of the job's keys: {} (grant the user's role read on the "
              "job's prefix)",
              message));
        }
        if (login_ && message.find("invalid auth token") != std::string::npos) {
          login_->expired(token);
        }
        last_error = fmt::format("etcd watch error: {}", message);
      } else if (first.at("result").value("created", false)) {
        co_return;
      } else {
        last_error = fmt::format("unexpected first watch message: {}", first.dump());
      }
    } catch (const store::StoreAuthError&) {
      throw;
    } catch (const std::exception& e) {
      bool hinted = false;
      last_error = fmt::format("{}: {}", describe(endpoints_[current_]),
                               failure(e, tls_ != nullptr, hinted));
    }
    if ((attempt + 1) % endpoints_.size() == 0) {
      pause.expires_at(std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
      co_await pause.async_wait(asio::as_tuple(use_awaitable));
    }
  }
}

asio::awaitable<std::string> WatchStream::read_line() {
  for (;;) {
    if (closed_ || !connection_) throw store::StoreConnectionError("the etcd watch was closed");
    if (const auto nl = lines_.find('\n'); nl != std::string::npos) {
      std::string line = lines_.substr(0, nl);
      lines_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) co_return line;
      continue;
    }
    lines_ += co_await connection_->read_stream_body();
  }
}

asio::awaitable<json> WatchStream::next() {
  const std::string line = co_await read_line();
  json message = json::parse(line, nullptr, false);
  if (!message.is_object())
    throw store::StoreConnectionError("etcd sent a watch message that is not JSON");
  if (message.contains("error")) {
    throw store::StoreConnectionError(fmt::format("etcd watch error: {}", message["error"].dump()));
  }
  json result = message.value("result", json::object());
  if (result.value("canceled", false)) {
    throw store::StoreConnectionError(fmt::format("etcd cancelled the watch: {}",
                                                  result.value("cancel_reason", std::string("?"))));
  }
  co_return result;
}

}  // namespace ddprun::rendezvous::etcd
