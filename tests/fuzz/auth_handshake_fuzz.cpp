// Fuzzes what a store with a secret reads from a connection that has not authenticated: the
// request parser in handshake-only mode, then the proof check over whatever it accepted.
// Properties, beyond "no crash, no sanitizer report":
//   - only VALIDATE, PING, SERVER_INFO, SERVER_TIME, AUTH_BEGIN and AUTH_PROVE get through, in
//     the modern dialect, each field within the handshake's bound;
//   - chunking does not matter: byte-at-a-time and whole-buffer parsing agree;
//   - a proof made from the input never matches a token it was not made with.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ddprun/store/auth.hpp"
#include "ddprun/store/wire_protocol.hpp"
#include "parse_chunked.hpp"

using namespace ddprun::store;
using namespace ddprun::store::wire;
using ddprun::testing::parse_chunked;

namespace {

bool allowed(Op op) {
  return op == Op::kValidate || op == Op::kPing || op == Op::kServerInfo || op == Op::kServerTime ||
         op == Op::kAuthBegin || op == Op::kAuthProve;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 13;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);

  RequestParser whole, pieces;
  whole.handshake_only(true);
  pieces.handshake_only(true);
  const auto a = parse_chunked(input, input.size() + 1, whole);
  const auto b = parse_chunked(input, chunk, pieces);
  if (a.size() != b.size() || whole.failed() != pieces.failed()) std::abort();
  if (!a.empty() && whole.dialect() != Dialect::kModern) std::abort();
  static const Token secret(std::string(32, 's'));
  static const Token other(std::string(32, 'o'));
  for (size_t i = 0; i < a.size(); ++i) {
    const Request& r = a[i];
    if (!allowed(r.op) || r.op != b[i].op || r.key != b[i].key || r.value != b[i].value) {
      std::abort();
    }
    if (r.key.size() > RequestParser::kHandshakeFieldBytes ||
        r.value.size() > RequestParser::kHandshakeFieldBytes) {
      std::abort();
    }
    if (r.op == Op::kAuthBegin) {
      const std::string made = auth::proof(other, auth::Side::kClient, r.key, r.value, r.key);
      if (auth::same_proof(made, auth::proof(secret, auth::Side::kClient, r.key, r.value, r.key)))
        std::abort();
      if (auth::same_proof(r.value,
                           auth::proof(secret, auth::Side::kClient, r.key, r.value, r.key))) {
        std::abort();  // 2^-256: a fuzzer that found this found a broken HMAC
      }
    }
  }
  return 0;
}
