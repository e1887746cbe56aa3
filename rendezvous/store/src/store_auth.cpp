// StoreConnection's side of authentication (auth.hpp): the challenge, the proof, and the scope
// every later request must stay in.
#include <fmt/format.h>

#include "ddprun/store/auth.hpp"
#include "store_connection.hpp"

namespace ddprun::store {
using wire::Op;

bool StoreConnection::handle_auth(const wire::Request& req) {
  const std::optional<Token>& secret = state_->options.secret;
  if (req.op == Op::kAuthBegin) {
    if (!secret) {
      wire::put_bytes(reply_, {});  // nothing to prove: the client decides whether that will do
      return true;
    }
    if (auth_ != Auth::kExpected) {
      close("sent AUTH_BEGIN a second time");
      return false;
    }
    if (req.value.size() != auth::kNonceBytes) {
      close(fmt::format("sent AUTH_BEGIN with a nonce of {} bytes", req.value.size()));
      return false;
    }
    scope_ = req.key;
    client_nonce_ = req.value;
    server_nonce_ = std::string(auth::view(auth::fresh_nonce()));
    auth_ = Auth::kChallenged;
    wire::put_bytes(reply_, server_nonce_);
    return true;
  }
  if (auth_ != Auth::kChallenged) {
    close("sent AUTH_PROVE without AUTH_BEGIN");
    return false;
  }
  const auto holds = [&](const Token& token) {
    return auth::same_proof(
        req.value, auth::proof(token, auth::Side::kClient, scope_, client_nonce_, server_nonce_));
  };
  // A scope's token grants its own scope (no token grants every key); the secret any scope. The
  // common case, a job's token, is tried first.
  std::optional<Token> granted;
  if (!scope_.empty()) {
    const Token& token = state_->scope_token(scope_);
    if (holds(token)) granted = token;
  }
  if (!granted && holds(*secret)) granted = *secret;
  if (!granted) {
    wire::put_u8(reply_, wire::kAuthRefused);
    refusal_ = fmt::format("refused: its proof for scope '{}' matches no token", scope_);
    closing_ = true;
    return true;
  }
  auth_ = Auth::kDone;
  parser_.handshake_only(false);
  wire::put_u8(reply_, wire::kAuthAccepted);
  wire::put_bytes(reply_,
                  auth::proof(*granted, auth::Side::kServer, scope_, client_nonce_, server_nonce_));
  client_nonce_.clear();
  server_nonce_.clear();
  return true;
}

const Token& StoreServer::State::scope_token(const std::string& scope) {
  if (const auto it = scope_tokens.find(scope); it != scope_tokens.end()) return it->second;
  if (scope_tokens.size() >= kScopeTokens) scope_tokens.clear();  // strangers' made-up scopes
  return scope_tokens.emplace(scope, store::scope_token(*options.secret, scope)).first->second;
}

bool StoreConnection::in_scope(const wire::Request& req) const {
  if (auth_ != Auth::kDone || scope_.empty()) return true;
  switch (req.op) {
    case Op::kGetNumKeys:
    case Op::kListKeys:
      return false;  // they would tell of every scope's keys
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
    case Op::kMultiSet:
      for (const auto& k : req.keys) {
        if (!k.starts_with(scope_)) return false;
      }
      return true;
    case Op::kValidate:
    case Op::kPing:
    case Op::kServerInfo:
    case Op::kServerTime:
    case Op::kKeepAlive:
    case Op::kCancelWait:
    case Op::kAuthBegin:
    case Op::kAuthProve:
      return true;
    default:  // one key
      return req.key.starts_with(scope_);
  }
}

}  // namespace ddprun::store
