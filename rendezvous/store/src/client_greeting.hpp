#pragma once
// A modern-dialect connection's first exchange, the same for request and watch connections:
// VALIDATE, a PING whose answer shows a TCPStore server that kept the connection, and with a
// credential AUTH_BEGIN, in one write.
#include <optional>

#include <boost/asio/awaitable.hpp>

#include "client_socket.hpp"
#include "ddprun/store/auth.hpp"

namespace ddprun::store {

// Throws StoreClosedEarly where the server ends the connection before answering the PING,
// StoreAuthError where it answers in TLS (a TLS-only store, this connection clear),
// StoreConnectionError where the answer is not the PING's, and what finish_authentication throws.
boost::asio::awaitable<void> greet(ClientSocket& socket,
                                   const std::optional<Credential>& credential);

}  // namespace ddprun::store
