#pragma once
// The exceptions the store, and the rendezvous layers above it, throw across their APIs. The
// launcher maps them to exit statuses.
#include <stdexcept>

namespace ddprun::store {

// Base of every store failure.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An operation or a wait did not finish within its timeout.
class StoreTimeout : public StoreError {
 public:
  using StoreError::StoreError;
};

// Connecting did not succeed by its deadline and the last try was refused: the server's host
// answered and nothing listened on the port, so the server is down rather than cut off.
class StoreRefused : public StoreTimeout {
 public:
  using StoreTimeout::StoreTimeout;
};

// The server could not be reached, or the connection broke or was closed by the server.
class StoreConnectionError : public StoreError {
 public:
  using StoreError::StoreError;
};

// The server ended a new connection before answering anything on it: it closed or reset it. A
// proxy whose backend is not up yet does that, and so does a server at its connection limit or not
// admitting this address (yet). Connecting again may succeed; the client's connect does, until its
// deadline.
class StoreClosedEarly : public StoreConnectionError {
 public:
  using StoreConnectionError::StoreConnectionError;
};

// The server refused this client's credential, asks for one the client does not have, or could
// not prove that it knows the client's token. Trying again does not help.
class StoreAuthError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace ddprun::store
