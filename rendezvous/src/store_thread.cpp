#include "ddprun/rendezvous/store_thread.hpp"

namespace ddprun::rendezvous {

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

void StoreThread::stop() {
  if (stopped_) return;
  stopped_ = true;
  call([](StoreServer& s) { s.stop(); });
}

}  // namespace ddprun::rendezvous
