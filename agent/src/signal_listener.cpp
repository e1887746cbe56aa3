#include "ddprun/agent/signal_listener.hpp"

#include <csignal>

namespace ddprun::agent {

SignalListener::SignalListener(boost::asio::io_context& io, const std::vector<int>& signals,
                               std::function<void(int)> handler)
    : signals_(signals), set_(std::in_place, io), handler_(std::move(handler)) {
  for (int s : signals_) set_->add(s);
  listen();
}

SignalListener::~SignalListener() {
  set_.reset();  // gives the signals back their default action, which would end the process
  for (int s : signals_) std::signal(s, SIG_IGN);
}

void SignalListener::cancel() {
  cancelled_ = true;
  set_->cancel();
}

void SignalListener::listen() {
  set_->async_wait([this](boost::system::error_code ec, int signo) {
    if (ec || cancelled_) return;
    handler_(signo);
    listen();
  });
}

}  // namespace ddprun::agent
