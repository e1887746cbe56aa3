#pragma once
// The worker's main with torchrun's error reporting (what torch's @record does for Python).
#include <functional>

namespace ddp {

// Runs fn(argc, argv) and returns its result. If fn throws, TORCHELASTIC_ERROR_FILE (when set) gets
// torch's error JSON ({"message": {"message": "<type>: <what>", "extraInfo": {"py_callstack": ...,
// "timestamp": "<unix seconds>"}}}) and run_main returns 1. If the process receives SIGSEGV,
// SIGBUS, SIGFPE, SIGILL or SIGABRT, the file is written from the signal handler
// (async-signal-safe) and the process then dies of that signal, so the launcher sees both the
// signal and its message.
int run_main(int argc, char** argv, const std::function<int(int, char**)>& fn);

}  // namespace ddp
