// The warm interpreter of --preload, with a real Python: how long a start that had rather wait for
// its imports (a spare node's standbys) waits.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "node/containment.hpp"
#include "workers/warm_interpreter.hpp"

using namespace ddprun::agent;
using namespace std::chrono_literals;

namespace {

// A folder with a script and a module whose import takes `seconds`.
struct ScriptFolder {
  std::filesystem::path dir;
  explicit ScriptFolder(int seconds) {
    std::string name = (std::filesystem::temp_directory_path() / "warm-interpreter-XXXXXX");
    REQUIRE(::mkdtemp(name.data()) != nullptr);
    dir = name;
    std::ofstream(dir / "train.py") << "pass\n";
    std::ofstream(dir / "slow_import.py") << "import time\ntime.sleep(" << seconds << ")\n";
  }
  ~ScriptFolder() { std::filesystem::remove_all(dir); }
};

// Whether a process whose command line names `dir` runs (the interpreter has it as sys.path[0]).
bool runs_in(const std::filesystem::path& dir) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream in(e.path() / "cmdline");
    const std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (line.find(dir.string()) != std::string::npos) return true;
  }
  return false;
}

// Whether a process names `dir` within 5 s (a process forked a moment ago may not have exec'd
// yet: it still shows its parent's command line).
bool one_runs_in(const std::filesystem::path& dir) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!runs_in(dir)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// Whether no process names `dir` within 5 s (a killed one may take a moment to end).
bool none_runs_in(const std::filesystem::path& dir) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (runs_in(dir)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// Polls settled(limit) on the event loop until it says true or `most` passed; how long it took.
std::chrono::steady_clock::duration until_settled(boost::asio::io_context& io,
                                                  WarmInterpreter& warm,
                                                  std::chrono::milliseconds limit,
                                                  std::chrono::seconds most) {
  const auto start = std::chrono::steady_clock::now();
  while (!warm.settled(limit) && std::chrono::steady_clock::now() - start < most) {
    io.run_one_for(20ms);
  }
  return std::chrono::steady_clock::now() - start;
}

}  // namespace

TEST_CASE("warm interpreter: a wait for imports that never end is given up at its limit",
          "[agent]") {
  boost::asio::io_context io;
  Containment containment(io, false);
  ScriptFolder folder(60);
  {
    WarmInterpreter warm(io, containment, {"/usr/bin/python3", (folder.dir / "train.py").string()},
                         PreloadSpec{{"slow_import"}});
    const auto began = std::chrono::steady_clock::now();
    warm.prepare(current_environment());
    CHECK(one_runs_in(folder.dir));
    CHECK_FALSE(warm.settled(30s));  // importing, and well within its limit
    until_settled(io, warm, 500ms, 10s);
    const auto took = std::chrono::steady_clock::now() - began;
    CHECK(took >= 500ms);
    CHECK(took < 10s);  // not the 60 s the import takes: starts are cold from here on
  }
  CHECK(none_runs_in(folder.dir));  // the interpreter ended with its owner
}

TEST_CASE("warm interpreter: imports that end within the limit are waited for", "[agent]") {
  boost::asio::io_context io;
  Containment containment(io, false);
  ScriptFolder folder(0);
  {
    WarmInterpreter warm(io, containment, {"/usr/bin/python3", (folder.dir / "train.py").string()},
                         PreloadSpec{{"slow_import"}});
    warm.prepare(current_environment());
    const auto took = until_settled(io, warm, 30s, 30s);
    CHECK(took < 30s);
    CHECK(warm.settled(std::chrono::hours(1)));  // because it is ready, not for a limit
    CHECK(runs_in(folder.dir));                  // ready, it waits for workers to fork
  }
  CHECK(none_runs_in(folder.dir));
}
