#pragma once
// A client's side of authentication (auth.hpp), on a connection that has sent VALIDATE.
#include <boost/asio/awaitable.hpp>

#include "client_socket.hpp"
#include "ddprun/store/auth.hpp"

namespace ddprun::store {

// Appends AUTH_BEGIN for `credential` to `out` (sent with the connection's first bytes, to save a
// round trip) and returns the client nonce it carries.
std::string begin_authentication(const Credential& credential, std::string& out);
// Once AUTH_BEGIN is sent and every reply before its own read: reads the challenge and puts the
// proof of `credential` in front of the connection's next request (ClientSocket::send_ahead), so
// that the server's answer and proof are read with that request's reply. Throws StoreAuthError when
// the server has no secret; the first read after it throws StoreAuthError when the server refuses
// the proof (closing the connection) or cannot prove that it knows the token.
boost::asio::awaitable<void> finish_authentication(ClientSocket& socket,
                                                   const Credential& credential,
                                                   const std::string& client_nonce);

}  // namespace ddprun::store
