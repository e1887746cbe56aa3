#pragma once
// Tokens, and the challenge-response by which a connection proves that it holds one.
//
// A store started with a secret (ddprund --auth-token-file, or an agent-hosted store given the
// job's token) serves a connection only after it has proved that it holds either
//   - the secret itself: every key, as an operator; or
//   - the token of a scope, derived from the secret and the scope (a key prefix, such as a job's
//     "/ddprun/<job>/"): the keys under that prefix, nothing else.
// The proof is an HMAC-SHA256 over both sides' fresh nonces, so the token never crosses the wire
// and a recorded exchange proves nothing on another connection. The server proves the same back,
// so a client that holds a token takes no reply from a store that does not know it (its first
// request goes out with its proof, and that request's reply is read after the server's proof).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddprun::store {

// A secret or a scope's token: the bytes of its file, without trailing white space.
class Token {
 public:
  // Throws StoreError when the file cannot be read, or holds fewer than kMinBytes bytes.
  static Token from_file(const std::string& path);
  explicit Token(std::string bytes);
  const std::string& bytes() const { return bytes_; }
  static constexpr size_t kMinBytes = 16;

 private:
  std::string bytes_;
};

// The token of `scope` under `secret`: 64 hex digits.
Token scope_token(const Token& secret, std::string_view scope);

// What a client proves: the token it holds, and the key prefix it asks for (empty: every key,
// which only the secret itself grants).
struct Credential {
  std::string scope;
  Token token;
};

namespace auth {

constexpr size_t kNonceBytes = 32;
using Nonce = std::array<char, kNonceBytes>;
// Throw StoreError where the system has no randomness.
Nonce fresh_nonce();
// 64 hex digits of fresh randomness (a nonce's worth): a secret to share as text.
std::string fresh_secret();
std::string_view view(const Nonce& n);

enum class Side : uint8_t { kClient, kServer };
// HMAC-SHA256(token, side, scope, client nonce, server nonce): 32 bytes.
std::string proof(const Token& token, Side side, std::string_view scope,
                  std::string_view client_nonce, std::string_view server_nonce);
// Constant time.
bool same_proof(std::string_view a, std::string_view b);

}  // namespace auth
}  // namespace ddprun::store
