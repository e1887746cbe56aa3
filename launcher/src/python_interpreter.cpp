#include "python_interpreter.hpp"

#include <cerrno>
#include <optional>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

namespace ddprun::launcher {
namespace {

// argv: script-or-module, "1" for -m. Prints the missing top-level modules, space-separated.
constexpr const char* kFindImports = R"(import ast, importlib.util, os, sys
target, module = sys.argv[1], sys.argv[2] == "1"
names = []
if module:
    names.append(target.split(".")[0])
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    try:
        with open(target, "rb") as f:
            body = ast.parse(f.read()).body
    except (OSError, SyntaxError, ValueError):
        body = []
    for node in body:
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
missing = []
for name in dict.fromkeys(names):
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        missing.append(name)
print(" ".join(missing))
)";

// Runs argv with env, stdout captured, for at most `limit`; nullopt when it does not finish in time
// or exits non-zero.
std::optional<std::string> output_of(const std::vector<std::string>& argv,
                                     const agent::Environment& env,
                                     std::chrono::milliseconds limit) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  args.push_back(nullptr);
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool finished = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      finished = true;
      break;
    }
    if (text.size() < 65536) text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (!finished) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!finished || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return text;
}

}  // namespace

PythonInterpreter choose_python(const agent::Environment& env) {
  if (auto it = env.find("PYTHON_EXEC"); it != env.end() && !it->second.empty()) {
    return {it->second, PythonInterpreter::Source::kPythonExec};
  }
  if (auto it = env.find(kInstalledInterpreterVariable); it != env.end() && !it->second.empty()) {
    return {it->second, PythonInterpreter::Source::kInstalledWith};
  }
  return {"python3", PythonInterpreter::Source::kPath};
}

std::string resolved_program(const std::string& program, const agent::Environment& env) {
  if (program.find('/') != std::string::npos) return program;
  auto it = env.find("PATH");
  std::istringstream dirs(it == env.end() ? std::string("/usr/local/bin:/usr/bin:/bin")
                                          : it->second);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return program;
}

std::vector<std::string> missing_imports(const std::string& python, const std::string& script,
                                         bool module, const agent::Environment& env,
                                         std::chrono::milliseconds limit) {
  const auto text = output_of(
      {resolved_program(python, env), "-c", kFindImports, script, module ? "1" : "0"}, env, limit);
  std::vector<std::string> missing;
  if (!text) return missing;
  std::istringstream words(*text);
  for (std::string w; words >> w;) {
    if (w != "ddprun") missing.push_back(w);  // the agent puts its own modules on the workers' path
  }
  return missing;
}

std::string interpreter_hint(const PythonInterpreter& python, const std::string& resolved,
                             const std::vector<std::string>& missing, const std::string& script) {
  if (missing.empty()) return {};
  std::string names;
  for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
  const char* why = python.source == PythonInterpreter::Source::kPythonExec ? "PYTHON_EXEC"
                    : python.source == PythonInterpreter::Source::kInstalledWith
                        ? "the interpreter ddprun was installed with"
                        : "the first python3 on PATH";
  return fmt::format(
      "The workers ran {} ({}), which cannot import {} (imported by {}). Choose another "
      "interpreter with PYTHON_EXEC=/path/to/python, or install ddprun into that interpreter's "
      "environment (pip install ddprun) and run its ddprun or python -m ddprun.\n",
      resolved, why, names, script);
}

}  // namespace ddprun::launcher
