#include "client_greeting.hpp"

#include <unistd.h>

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "client_auth.hpp"
#include "ddprun/store/errors.hpp"
#include "ddprun/store/wire_protocol.hpp"
#include "tls_alert.hpp"

namespace ddprun::store {

boost::asio::awaitable<void> greet(ClientSocket& socket,
                                   const std::optional<Credential>& credential) {
  const auto nonce = static_cast<uint32_t>(::getpid());
  std::string out;
  wire::Request validate;
  validate.op = wire::Op::kValidate;
  validate.u32 = wire::kValidationMagic;
  wire::encode_request(validate, wire::Dialect::kModern, out);
  wire::Request ping;
  ping.op = wire::Op::kPing;
  ping.u32 = nonce;
  wire::encode_request(ping, wire::Dialect::kModern, out);
  std::string client_nonce;
  if (credential) client_nonce = begin_authentication(*credential, out);
  co_await socket.write(out);
  const uint32_t answer = co_await socket.read_u32();
  if (answer != nonce) {
    socket.close();
    if (tls_alert::begins_alert(answer & 0xff, (answer >> 8) & 0xff)) {
      throw StoreAuthError(fmt::format(
          "the store at {} answered with a TLS alert: it serves TLS only (give rdzv_conf "
          "protocol=https, and its cacert)",
          socket.endpoint_name()));
    }
    throw StoreConnectionError(
        fmt::format("{} did not answer PING like a TCPStore server", socket.endpoint_name()));
  }
  if (credential) co_await finish_authentication(socket, *credential, client_nonce);
}

}  // namespace ddprun::store
