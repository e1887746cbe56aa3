#pragma once
// Which Python runs Python workers, and why; and, after a failure, which of the script's imports
// that Python cannot find.
#include <chrono>
#include <string>
#include <vector>

#include "ddprun/agent/environment.hpp"

namespace ddprun::launcher {

// Set by the wheel's `ddprun` and `python -m ddprun` to their own sys.executable (as torchrun runs
// workers with its own interpreter). The launcher reads it and never passes it to a worker.
inline constexpr const char* kInstalledInterpreterVariable = "DDPRUN_INTERPRETER";

struct PythonInterpreter {
  enum class Source { kPythonExec, kInstalledWith, kPath };
  std::string program;  // as it is executed: a path, or a name looked up on PATH
  Source source = Source::kPath;
};

// PYTHON_EXEC wins, then the interpreter ddprun was installed with, then python3 on PATH.
PythonInterpreter choose_python(const agent::Environment& env);

// The program's full path: a name without a slash is looked up on env's PATH (as the worker's exec
// does); unchanged when not found.
std::string resolved_program(const std::string& program, const agent::Environment& env);

// The top-level modules that `python` cannot find among those a script imports at module level (or,
// for `-m`, the module's own package), searched as the worker would search them (the script's
// folder first, env's PYTHONPATH, site-packages), but ddprun's own, which the agent provides.
// Empty when all are found, and when the check itself cannot run within `limit`.
std::vector<std::string> missing_imports(const std::string& python, const std::string& script,
                                         bool module, const agent::Environment& env,
                                         std::chrono::milliseconds limit);

// The failure summary's paragraph naming the interpreter that ran, what it lacks, and how to choose
// another; empty when `missing` is.
std::string interpreter_hint(const PythonInterpreter& python, const std::string& resolved,
                             const std::vector<std::string>& missing, const std::string& script);

}  // namespace ddprun::launcher
