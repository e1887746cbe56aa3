#pragma once
// The launcher's own TORCHELASTIC_ERROR_FILE, as torchrun's @record-decorated main fills it for
// whatever started torchrun (a scheduler such as TorchX, or an outer elastic agent):
// - the workers failed and this node's first failure (the earliest) left an error file: that
//   file's JSON, with "errorCode" set to the worker's exit status (not where it is 0 or the
//   message is not an object), as torch's ErrorHandler.dump_error_file writes it;
// - the workers failed and that one left none: nothing (an existing file stays);
// - a signal stopped the launcher: "SignalException: Process <pid> got signal: <N>";
// - the launch failed, a health check kept the node out, or a value was refused: "<Kind>: <why>"
//   (LaunchError, UnhealthyNode, ValueError) in torch's layout, with an empty "py_callstack";
// - success or a usage error (torchrun's SystemExit): nothing.
// A file there is replaced (with a warning where a worker's record replaces it, as torch warns).
// Bytes that are not UTF-8 become U+FFFD. Failing to write is a warning, never an error: the exit
// status is the launcher's answer.
#include <string>

#include "ddprun/agent/agent.hpp"

namespace ddprun::launcher {

// Writes `outcome` to `path` by the rules above.
void write_launcher_error_file(const std::string& path, const agent::AgentOutcome& outcome);
// Writes a refused value (`what`) to `path` as torchrun's ValueError would be.
void write_refused_value(const std::string& path, const std::string& what);

}  // namespace ddprun::launcher
