#pragma once
// Runs a process group's blocking operations one at a time, in submission order, on a thread of its
// own: that is what makes the *_async forms asynchronous and keeps every rank's order the same.
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "ddp/process_group.hpp"

namespace ddp {

class OpQueue {
 public:
  OpQueue();
  // Finishes the queued operations, then joins the thread.
  ~OpQueue();
  Work submit(std::function<void()> op);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> ops_;
  bool closing_ = false;
  std::thread thread_;
};

}  // namespace ddp
