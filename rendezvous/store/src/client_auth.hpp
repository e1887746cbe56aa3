#pragma once
// A client's side of authentication (auth.hpp), on a connection that has sent VALIDATE.
#include <boost/asio/awaitable.hpp>

#include "client_socket.hpp"
#include "ddprun/store/auth.hpp"

namespace ddprun::store {

// Proves `credential` to the server and checks the server's proof back. Throws StoreAuthError when
// the server refuses it (closing the connection), has no secret, or proves nothing.
boost::asio::awaitable<void> authenticate(ClientSocket& socket, const Credential& credential);

}  // namespace ddprun::store
