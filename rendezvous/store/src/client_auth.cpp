#include "client_auth.hpp"

#include <fmt/format.h>

#include "ddprun/store/errors.hpp"
#include "ddprun/store/wire_protocol.hpp"

namespace ddprun::store {

std::string begin_authentication(const Credential& credential, std::string& out) {
  wire::Request begin;
  begin.op = wire::Op::kAuthBegin;
  begin.key = credential.scope;
  begin.value = std::string(auth::view(auth::fresh_nonce()));
  wire::encode_request(begin, wire::Dialect::kModern, out);
  return begin.value;
}

boost::asio::awaitable<void> finish_authentication(ClientSocket& socket,
                                                   const Credential& credential,
                                                   const std::string& client_nonce) {
  const std::string server_nonce = co_await socket.read_bytes(auth::kNonceBytes);
  if (server_nonce.empty()) {
    socket.close();
    throw StoreAuthError(fmt::format(
        "the store at {} does not authenticate (it was started without a token), and this "
        "client has one: refusing to use it",
        socket.endpoint_name()));
  }
  if (server_nonce.size() != auth::kNonceBytes) {
    socket.close();
    throw StoreAuthError(
        fmt::format("the store at {} sent a malformed challenge", socket.endpoint_name()));
  }
  wire::Request prove;
  prove.op = wire::Op::kAuthProve;
  prove.value = auth::proof(credential.token, auth::Side::kClient, credential.scope, client_nonce,
                            server_nonce);
  std::string out;
  wire::encode_request(prove, wire::Dialect::kModern, out);
  const std::string expected = auth::proof(credential.token, auth::Side::kServer, credential.scope,
                                           client_nonce, server_nonce);
  const std::string where = socket.endpoint_name();
  const std::string scope = credential.scope;
  socket.send_ahead(
      std::move(out), [expected, where, scope](uint8_t status, const std::string& server_proof) {
        if (status != wire::kAuthAccepted) {
          throw StoreAuthError(fmt::format("the store at {} refused this token{}", where,
                                           scope.empty()
                                               ? std::string(" for every key")
                                               : fmt::format(" for the keys under '{}'", scope)));
        }
        if (!auth::same_proof(server_proof, expected)) {
          throw StoreAuthError(
              fmt::format("the store at {} could not prove that it knows this token", where));
        }
      });
  co_return;
}

}  // namespace ddprun::store
