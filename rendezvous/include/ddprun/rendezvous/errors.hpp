#pragma once
// The exceptions the rendezvous part throws across its API. The launcher maps them to exit
// statuses.
#include <stdexcept>

namespace ddprun::rendezvous {

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

// The server could not be reached, or the connection broke or was closed by the server.
class StoreConnectionError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace ddprun::rendezvous
