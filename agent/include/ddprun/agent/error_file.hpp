#pragma once
// TORCHELASTIC_ERROR_FILE: the JSON a worker leaves when it dies of an uncaught error, as torch's
// @record writes it (and ddprun's SDK):
//   {"message": {"message": "<Type>: <text>",
//                "extraInfo": {"py_callstack": "<traceback>", "timestamp": "<unix seconds>"},
//                "errorCode": <optional int>}}
// Older writers put a string in "message" and "timestamp" at the top level; both are read.
#include <optional>
#include <string>

namespace ddprun::agent {

struct ErrorRecord {
  std::string message;
  std::string traceback;  // empty when the file has none
  std::optional<long> timestamp;
  std::optional<int> error_code;
};

// nullopt when the file does not exist; a record whose message says so when it is not valid JSON.
std::optional<ErrorRecord> read_error_file(const std::string& path);

}  // namespace ddprun::agent
