#pragma once
// Nothing a worker starts outlives it. Three layers, each covering what the one before cannot:
//  - each worker leads its own process group, killed as a whole when it exits or is stopped;
//  - where this agent's cgroup v2 folder is writable, each worker has a cgroup of its own, killed
//    as a whole (cgroup.kill): that catches processes that left the group (setsid, double forks);
//  - the agent is a child subreaper, so descendants orphaned by their parent's exit become its
//    children; those still alive when a worker group ends are killed.
// A SIGKILLed agent cannot do any of that; its guardian (guardian.hpp) kills every listed worker's
// process group and cgroup when it sees the agent gone, and every process that began with this
// agent's mark in its environment (worker_marker(): what left both, orphaned or not).
#include <sys/types.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "ddprun/agent/worker_cgroup.hpp"
#include "node/guardian.hpp"

namespace ddprun::agent {

class Containment {
 public:
  // Becomes a child subreaper, opens the cgroup tree where it can (one log line says which), and
  // starts the guardian. `use_cgroups`: false keeps workers in process groups only.
  Containment(boost::asio::io_context& io, bool use_cgroups = true);
  ~Containment();

  // The variable (name, value) every worker's environment carries, unique to this agent, by which
  // its guardian finds the workers' descendants; nullopt where there is no guardian.
  const std::optional<std::pair<std::string, std::string>>& worker_marker() const {
    return marker_;
  }
  // A cgroup for the next worker, or nullptr where cgroups are not used.
  std::unique_ptr<WorkerCgroup> worker_cgroup();
  // A worker (its process group, and its cgroup's path or empty) started / was stopped and reaped.
  void started(pid_t pgid, const std::string& cgroup);
  void ended(pid_t pgid);
  // `folder` (and what it holds) is removed by the guardian should this agent be SIGKILLed; false
  // where there is no guardian to do it.
  bool remove_after_a_kill(const std::string& folder);
  // SIGKILLs and reaps every adopted orphan (a child of this agent that is not a live worker).
  void kill_orphans();
  // While one lives, an ended child is not reaped as an orphan: a worker another process forked
  // (the warm interpreter) is this agent's child before the agent knows its pid, and its own watch
  // must find it. Orphans that ended meanwhile are reaped when the last hold ends.
  class ReapingHold {
   public:
    explicit ReapingHold(Containment& c) : c_(c) { ++c_.holds_; }
    ~ReapingHold();
    ReapingHold(const ReapingHold&) = delete;
    ReapingHold& operator=(const ReapingHold&) = delete;

   private:
    Containment& c_;
  };
  ReapingHold hold_reaping() { return ReapingHold(*this); }
  // Stops reaping on SIGCHLD (so that the io_context can run out of work); the destructor still
  // kills and reaps what is left.
  void stop_listening();

 private:
  void reap_orphans(bool kill);
  void listen_sigchld();

  std::unique_ptr<CgroupTree> tree_;
  std::unique_ptr<Guardian> guardian_;
  std::optional<std::pair<std::string, std::string>> marker_;
  std::set<pid_t> workers_;
  boost::asio::signal_set sigchld_;
  bool listening_ = true;
  int holds_ = 0;                // ReapingHolds alive
  bool reap_when_held_ = false;  // a child ended during a hold
};

}  // namespace ddprun::agent
