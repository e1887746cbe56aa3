#pragma once
// The exception a Python worker died of, read back from the end of its stderr: for the failure
// summary's traceback when the worker wrote no error file (no torch @record).
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::agent {

struct PythonTraceback {
  std::string exception;  // "ValueError: bad batch shape"
  std::string traceback;  // from "Traceback (most recent call last):" to the last frame's lines
};

// The last traceback Python printed in `output`: its "Traceback (most recent call last):" line,
// the indented lines of its frames, and the first line after them that is not indented (the
// exception). nullopt when `output` holds none (or one cut off before its exception).
std::optional<PythonTraceback> last_python_traceback(std::string_view output);

// The last line of `output` that is not empty, without its line end ("" none): what a process
// said last (a traceback's exception).
std::string last_line(std::string_view output);

}  // namespace ddprun::agent
