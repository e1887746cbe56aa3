#include "ddprun/store/store_thread.hpp"

#include <pthread.h>
#include <time.h>

namespace ddprun::store {

StoreThread::StoreThread(ServerOptions options)
    : work_(boost::asio::make_work_guard(io_)),
      server_(std::make_unique<StoreServer>(io_, std::move(options))),
      port_(server_->port()),
      thread_([this] { io_.run(); }) {}

StoreThread::~StoreThread() {
  stop();
  work_.reset();
  io_.stop();
  thread_.join();
  server_.reset();  // on this thread now that the store's thread is gone
}

double StoreThread::cpu_seconds() const {
  clockid_t clock;
  timespec ts{};
  if (pthread_getcpuclockid(const_cast<std::thread&>(thread_).native_handle(), &clock) != 0 ||
      clock_gettime(clock, &ts) != 0) {
    return 0;
  }
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

void StoreThread::stop() {
  if (stopped_) return;
  stopped_ = true;
  call([](StoreServer& s) { s.stop(); });
}

}  // namespace ddprun::store
