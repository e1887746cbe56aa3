#pragma once
// --restart_mode=in_process: how the agent and one worker that runs its training under
// ddprun.inprocess agree on an in-process restart, through files in a folder of the agent's
// (named by DDPRUN_INPROCESS_FILE in the worker's environment). The protocol (docs/operations.md):
//
//   agent  -> <file>          {"generation": G, "state": "run"}           the worker runs attempt G
//   worker -> <file>.ready    (empty)                                      it can restart in
//   process worker -> <file>.raised   "G\n<the exception>"                         its training
//   raised agent  -> <file>          {"generation": G, "state": "abort"}          abort attempt G's
//                                                                          collectives and wait
//          (after a hang: "stack": true as well)
//   worker -> <file>.stack    "G\n<every thread's stack, faulthandler's>"  where it waited,
//                                                                          before the abort
//   worker -> <file>.parked   "G"                                          aborted, waiting, its
//                                                                          checkpoints untouched
//   agent  -> <file>          {"generation": H, "state": "run", "env": {},  run again as attempt H
//                              "unset": []}                                with this environment,
//                                                                          without those variables
//
// A standby (--standby_workers) starts with {"generation": 0, "state": "standby"}, says .ready once
// it waits in ddprun.inprocess.run(), and takes a worker's place with the "run" above.
//
// The agent writes <file> whole (a rename); the worker polls it. Private to the agent.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "ddprun/agent/environment.hpp"

namespace ddprun::agent {

class InProcessChannel {
 public:
  // The channel of local rank `local_rank` in `dir` (which exists); nothing is written yet.
  InProcessChannel(const std::string& dir, int local_rank);
  // The channel of standby number `number` in `dir`.
  static std::unique_ptr<InProcessChannel> for_standby(const std::string& dir, uint64_t number);

  const std::string& path() const { return path_; }
  // A new worker process is about to start for attempt `generation`: the worker's files of an
  // earlier process are removed and <file> says "run".
  void started(uint64_t generation);
  // A standby is about to start: as started(), but <file> says "standby".
  void standing_by();
  // The worker said it can restart in process.
  bool ready() const;
  // What the worker's training raised in attempt `generation`, if it said so.
  std::optional<std::string> raised(uint64_t generation) const;
  // Asks the worker to abort attempt `generation`; with `stack`, to write its threads' stacks
  // first (a hang: where it waited).
  void abort(uint64_t generation, bool stack);
  // The stacks the worker wrote before it aborted attempt `generation`, if it did.
  std::optional<std::string> stack(uint64_t generation) const;
  // The worker aborted attempt `generation` and waits.
  bool parked(uint64_t generation) const;
  // Tells a parked worker to run again as attempt `generation`, with `env` where it had `was`.
  void resume(uint64_t generation, const Environment& env, const Environment& was);

 private:
  explicit InProcessChannel(std::string path) : path_(std::move(path)) {}
  // Removes what a worker of an earlier process wrote.
  void clear();
  void write(const std::string& json);
  // What the worker's file <path>`suffix` says after its first line, if that is `generation`.
  std::optional<std::string> text_of(const char* suffix, uint64_t generation) const;

  std::string path_;
};

}  // namespace ddprun::agent
