#pragma once
// --preload: one Python interpreter per node that has imported the preloaded modules once and
// forks every worker, the first start and each restart, instead of a cold `python -u script`.
//
// Safety before speed: workers are forked only while the interpreter has one thread, has not
// initialised CUDA (no /dev/nvidia* descriptor either) and imported every module; otherwise they
// start cold and one log line says why. A warm interpreter that dies is replaced; workers start
// cold meanwhile. It is started with the node's shared worker environment (worker_env.hpp:
// shared_part), which is what a library reading a variable at import sees; a worker whose shared
// environment differs from it starts cold while a new one with that environment imports.
//
// The forked worker (python/ddprun/warm_interpreter.py does the child's side) leads its own process
// group, moves into its cgroup, takes its stdin/stdout/stderr, is adopted by this process (this
// process is a child subreaper and the interpreter's intermediate child exits at once), gets
// SIGKILL when this process dies, and has the argv, environment, sys.argv, __main__, __file__,
// sys.path[0] and random state of a cold start.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "ddprun/agent/environment.hpp"
#include "ddprun/agent/preload_spec.hpp"
#include "ddprun/agent/worker_process.hpp"
#include "node/containment.hpp"

namespace ddprun::agent {

class WarmInterpreter : public ForkServer {
 public:
  // `entrypoint`: the workers' command line, {python, options..., [-m], script, args...}: workers
  // whose argv starts with the same interpreter and options are forked. sys.path[0] during the
  // imports is the script's folder (the working folder for -m), as for a cold start. Nothing
  // starts before prepare().
  WarmInterpreter(boost::asio::io_context& io, Containment& containment,
                  const std::vector<std::string>& entrypoint, PreloadSpec preload);
  ~WarmInterpreter() override;
  WarmInterpreter(const WarmInterpreter&) = delete;
  WarmInterpreter& operator=(const WarmInterpreter&) = delete;

  // Starts an interpreter with `shared_env` unless one with that environment is starting or
  // ready, or warm starts were given up for good (a preload failed, a thread, CUDA).
  void prepare(const Environment& shared_env);
  // Returns once the interpreter is ready, has given up, or `limit` passed (then workers start
  // cold until it is ready).
  boost::asio::awaitable<void> ready(std::chrono::milliseconds limit);
  // Returns once the ready interpreter answers (it does at once but during a step of its warm-up:
  // python/ddprun/warm_interpreter.py), or `limit` passed (then it is retired: workers start cold,
  // and a new one with the next round). Awaited before workers start, so that a step of the
  // warm-up is not taken for a fork that does not answer.
  boost::asio::awaitable<void> answering(std::chrono::milliseconds limit);

  // Whether a start() now finds the imports over: the interpreter is ready, or workers start cold
  // (warm starts given up, no interpreter runs, or it has imported for longer than `limit`: said
  // once in the log, and starts are cold until it is ready). Reads its "ready" without blocking:
  // for a start that had rather wait for it than start cold (a spare node's standbys), polled.
  bool settled(std::chrono::milliseconds limit);

  boost::asio::awaitable<std::optional<pid_t>> start(const SpawnSpec& spec, ChildFds fds) override;
  // The attempt began to stop: a start() waiting for its fork's answer ends now, and the
  // interpreter is retired. The interpreter reports a worker before it lets it run: one reported
  // by the time it ended is returned (and the caller stops it), one not reported ends without
  // running anything. Nothing where no start() waits.
  void stop_forking();

 private:
  void launch(const Environment& env);
  void retire();       // kills and forgets the interpreter
  void end_process();  // kills and reaps the interpreter, its socket kept
  // Reads the interpreter's "ready" or "cold REASON" without blocking (and says so in the log).
  enum class Heard { kNothing, kReady, kCold, kEnded };
  Heard take_ready_message();
  // Waits on the event loop, at most `limit`, until the socket is readable and `heard()` says
  // the message it waits for came (or the socket is gone).
  boost::asio::awaitable<void> until_heard(std::chrono::milliseconds limit,
                                           const std::function<bool()>& heard);
  void go_cold(const std::string& why, bool for_good);

  boost::asio::io_context& io_;
  Containment& containment_;
  std::vector<std::string> python_;  // the interpreter and its options
  std::string main_dir_;
  size_t command_room_ = 0;  // bytes a worker's command line may take
  PreloadSpec preload_;
  std::unique_ptr<WorkerProcess> process_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> control_;
  Environment env_;
  bool ready_ = false;
  std::chrono::steady_clock::time_point launched_at_;  // when the interpreter now running began
  bool forking_ = false;                               // a start() waits for its fork's answer
  bool stop_forking_ = false;                          // ... and is to stop waiting
  std::string given_up_;   // non-empty: workers start cold for the rest of the run, and why
  std::string last_cold_;  // the last reason logged, so that each is logged once
};

}  // namespace ddprun::agent
