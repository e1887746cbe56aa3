#pragma once
// The token of an etcd user (EtcdLogin), shared by a job store's calls and watches: logged in for
// on first use, and again whenever etcd says the token is no longer valid (a simple token expires
// after --auth-token-ttl seconds without use, 300 by default), without disturbing the job.
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>

#include "ddprun/job_store/etcd_endpoint.hpp"
#include "etcd_client.hpp"

namespace ddprun::rendezvous::etcd {

class Login {
 public:
  Login(boost::asio::any_io_executor ex, std::vector<Endpoint> endpoints,
        std::chrono::milliseconds attempt_timeout, std::shared_ptr<boost::asio::ssl::context> tls,
        EtcdLogin login);
  ~Login();

  // The token to send; logs in first where there is none. Throws StoreAuthError when etcd refuses
  // the user or the password, StoreConnectionError when no member answers by `deadline`.
  boost::asio::awaitable<std::string> token(Clock::time_point deadline);
  // etcd refused `used` as invalid: the next token() logs in again (once, whoever asks first).
  void expired(const std::string& used);
  const std::string& user() const { return login_.user; }

 private:
  std::unique_ptr<Client> client_;  // without a login: authenticate needs none
  EtcdLogin login_;
  std::string token_;
  int logins_ = 0;  // times logged in: every one after the first is logged
};

}  // namespace ddprun::rendezvous::etcd
