#include "etcd_login.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/store/errors.hpp"

namespace ddprun::rendezvous::etcd {

Login::Login(boost::asio::any_io_executor ex, std::vector<Endpoint> endpoints,
             std::chrono::milliseconds attempt_timeout,
             std::shared_ptr<boost::asio::ssl::context> tls, EtcdLogin login)
    : client_(std::make_unique<Client>(ex, std::move(endpoints), attempt_timeout, std::move(tls))),
      login_(std::move(login)) {}

Login::~Login() = default;

boost::asio::awaitable<std::string> Login::token(Clock::time_point deadline) {
  if (!token_.empty()) co_return token_;
  nlohmann::json body;
  body["name"] = login_.user;
  body["password"] = login_.password;
  nlohmann::json reply;
  try {
    reply = co_await client_->call("/v3/auth/authenticate", body, deadline);
  } catch (const store::StoreConnectionError&) {
    throw;
  } catch (const store::StoreError& e) {
    throw store::StoreAuthError(
        fmt::format("etcd refused the login of user '{}': {}", login_.user, e.what()));
  }
  const std::string token = reply.value("token", std::string());
  if (token.empty()) {
    throw store::StoreAuthError(fmt::format(
        "etcd gave user '{}' no token (is authentication enabled on the cluster?)", login_.user));
  }
  if (logins_++ > 0) spdlog::info("etcd: logged in again as '{}' (its token expired)", login_.user);
  token_ = token;
  co_return token_;
}

void Login::expired(const std::string& used) {
  if (used == token_) token_.clear();
}

}  // namespace ddprun::rendezvous::etcd
