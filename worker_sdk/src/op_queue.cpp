#include "op_queue.hpp"

namespace ddp {

OpQueue::OpQueue() : thread_([this] { loop(); }) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

Work OpQueue::submit(std::function<void()> op) {
  std::packaged_task<void()> task(std::move(op));
  Work work(task.get_future().share());
  {
    std::lock_guard lock(mu_);
    ops_.push_back(std::move(task));
  }
  cv_.notify_one();
  return work;
}

void OpQueue::loop() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return closing_ || !ops_.empty(); });
      if (ops_.empty()) return;
      task = std::move(ops_.front());
      ops_.pop_front();
    }
    task();
  }
}

}  // namespace ddp
