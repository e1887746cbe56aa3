#pragma once
// The SDK's exceptions. ddp::run_main() turns any of them into the worker's error file.
#include <stdexcept>

namespace ddp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A launcher variable is missing or malformed; the message names it.
class EnvError : public Error {
 public:
  using Error::Error;
};

// A collective or the rendezvous did not finish within its timeout (a peer is gone or stuck).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// The transport failed: a peer closed its connection, a device error.
class CommError : public Error {
 public:
  using Error::Error;
};

// An in-memory checkpoint could not be saved or restored (ddp/checkpoint.hpp); the message says
// why and what to change.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace ddp
