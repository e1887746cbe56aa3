#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

#include "agent_config.hpp"
#include "launch_config.hpp"
#include "python_interpreter.hpp"

using namespace ddprun::launcher;
using ddprun::agent::Environment;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> worker_command(const Environment& env) {
  return make_agent_config(parse_command_line({"t.py"}, env), env, nullptr).entrypoint;
}

// A script in a folder of its own, beside a module of that folder.
std::string script_with(const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ddprun-imports-" + std::to_string(::getpid()) + "-" +
                    std::to_string(std::hash<std::string>{}(text)));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "beside.py") << "X = 1\n";
  std::ofstream(dir / "train.py") << text;
  return (dir / "train.py").string();
}

const Environment kSystem = {{"PATH", "/usr/bin:/bin"}};

}  // namespace

TEST_CASE("interpreter: PYTHON_EXEC wins over the one ddprun was installed with over python3",
          "[interpreter]") {
  CHECK(worker_command({})[0] == "python3");
  CHECK(worker_command({{kInstalledInterpreterVariable, "/venv/bin/python"}})[0] ==
        "/venv/bin/python");
  CHECK(worker_command({{kInstalledInterpreterVariable, "/venv/bin/python"},
                        {"PYTHON_EXEC", "/opt/py"}})[0] == "/opt/py");
  CHECK(choose_python({}).source == PythonInterpreter::Source::kPath);
}

TEST_CASE("interpreter: the installed interpreter's variable never reaches a worker",
          "[interpreter]") {
  const Environment env = {{kInstalledInterpreterVariable, "/venv/bin/python"}, {"HOME", "/h"}};
  const auto a = make_agent_config(parse_command_line({"t.py"}, env), env, nullptr);
  CHECK_FALSE(a.env.contains(kInstalledInterpreterVariable));
  CHECK(a.env.at("HOME") == "/h");
}

TEST_CASE("interpreter: a name is found on PATH and a path is kept", "[interpreter]") {
  CHECK(resolved_program("sh", {{"PATH", "/nonexistent:/bin"}}) == "/bin/sh");
  CHECK(resolved_program("./py", {}) == "./py");
  CHECK(resolved_program("no-such-program-here", {{"PATH", "/bin"}}) == "no-such-program-here");
}

TEST_CASE("interpreter: the script's module-level imports that python cannot find are named",
          "[interpreter]") {
  const auto script = script_with(
      "import os, no_such_module_a.sub\n"
      "from beside import X\n"
      "from . import relative_is_skipped\n"
      "from no_such_module_b import y\n"
      "def f():\n    import only_when_called\n");
  CHECK(missing_imports("python3", script, false, kSystem, 10s) ==
        std::vector<std::string>{"no_such_module_a", "no_such_module_b"});
  CHECK(missing_imports("python3", script_with("import json\n"), false, kSystem, 10s).empty());
  // A script that does not parse, and the check's own failure, name nothing.
  CHECK(missing_imports("python3", script_with("import (\n"), false, kSystem, 10s).empty());
  CHECK(missing_imports("/nonexistent/python", script, false, kSystem, 10s).empty());
}

TEST_CASE("interpreter: with -m the module's own package is checked", "[interpreter]") {
  CHECK(missing_imports("python3", "json.tool", true, kSystem, 10s).empty());
  CHECK(missing_imports("python3", "no_such_package.train", true, kSystem, 10s) ==
        std::vector<std::string>{"no_such_package"});
}

TEST_CASE("interpreter: the hint names the interpreter its source and the way out",
          "[interpreter]") {
  const PythonInterpreter path{"python3", PythonInterpreter::Source::kPath};
  const auto hint = interpreter_hint(path, "/usr/bin/python3", {"torch", "numpy"}, "train.py");
  CHECK(
      hint.starts_with("The workers ran /usr/bin/python3 (the first python3 on PATH), which "
                       "cannot import torch, numpy (imported by train.py)."));
  CHECK(hint.find("PYTHON_EXEC=") != std::string::npos);
  CHECK(interpreter_hint(path, "/usr/bin/python3", {}, "train.py").empty());
  const PythonInterpreter exec{"/opt/py", PythonInterpreter::Source::kPythonExec};
  CHECK(interpreter_hint(exec, "/opt/py", {"torch"}, "t.py").find("(PYTHON_EXEC)") !=
        std::string::npos);
}
