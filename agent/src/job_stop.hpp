#pragma once
// The job's stop on this node, as one thing: the signal that stops it (one to this agent, one the
// head node passed on, or one another node announced first), and the order a stop goes in. While
// this node's workers run, they get the signal (and the peers are told, so their workers get it
// too). Outside their run (joining, the master's store, a health check, a round's barrier), the
// peers are told first, within a second, then every wait of the job's coroutine (bound to slot())
// is cancelled and the rendezvous abandoned. What the job runs beside its coroutine (a round's
// watch for interruptions, a hang's announcement, a stop's) is started here, bound to the job:
// cancelled where it still runs when the job ends.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "ddprun/rendezvous/rendezvous.hpp"
#include "logs/event_log.hpp"
#include "workers/worker_group.hpp"

namespace ddprun::agent {

class JobStop {
 public:
  // All four outlive this.
  JobStop(boost::asio::io_context& io, std::shared_ptr<rendezvous::Rendezvous> rdzv,
          WorkerGroup& group, EventLog& events, int node_rank);
  JobStop(const JobStop&) = delete;
  JobStop& operator=(const JobStop&) = delete;

  // A signal to this agent, or one the head node passed on. A second one while the workers stop
  // stops them again (the group's rule: SIGKILL on a repeat); one that follows a peer's stop of
  // the same job is that stop arriving here, not a second request.
  void signal(int signo);
  // A stop another node announced (`why`: how it was learnt), reaching this node while its workers
  // run: they get its signal as if it had reached this agent. Nothing where a stop is under way.
  void follow_peer(int signo, const std::string& why);
  // A stop another node announced, found where no worker runs (the rendezvous had no next round):
  // the job ends with it unless a stop is already under way here.
  void adopt(int signo);

  int signo() const { return signo_; }  // the signal that stops the job (0: none)
  bool stopping() const { return signo_ != 0; }
  // Where the job's coroutine binds its cancellation: a stop outside the workers' run emits it.
  boost::asio::cancellation_slot slot() { return waits_.slot(); }

  // Runs `task` (an awaitable<void>, or a function object that returns one) on the event loop
  // beside the job's coroutine, bound to the job: end() cancels it (terminal) if it still runs;
  // after end(), nothing starts. Its exception, if it ends with one, is dropped, as a detached
  // task's. The task's cancellation signal lives as long as the task (its completion handler
  // holds it), should the task outlive this.
  template <typename Task>
  void spawn(Task&& task) {
    if (ended_) return;
    const uint64_t id = ++spawned_;
    auto cancel = std::make_shared<boost::asio::cancellation_signal>();
    tasks_.emplace(id, cancel);
    boost::asio::co_spawn(
        io_, std::forward<Task>(task),
        boost::asio::bind_cancellation_slot(cancel->slot(), [this, id, cancel](std::exception_ptr) {
          tasks_.erase(id);  // (this handler still holds its signal)
        }));
  }
  // The job's coroutine ended: what spawn() started and still runs is cancelled, and ends as the
  // event loop runs on. Call it once the rendezvous was abandoned: a store request cancelled
  // half-way must find the connection closed, not carry on beside the next one.
  void end();

 private:
  void stop_waiting_after_announcing(int signo);
  void stop_waiting();

  boost::asio::io_context& io_;
  std::shared_ptr<rendezvous::Rendezvous> rdzv_;
  WorkerGroup& group_;
  EventLog& events_;
  int node_rank_;
  int signo_ = 0;
  bool peer_stopped_ = false;  // the workers stop with a signal a peer announced
  bool stopped_waiting_ = false;
  boost::asio::cancellation_signal waits_;
  bool ended_ = false;
  uint64_t spawned_ = 0;  // tasks spawn() started
  std::map<uint64_t, std::shared_ptr<boost::asio::cancellation_signal>> tasks_;  // still running
};

}  // namespace ddprun::agent
