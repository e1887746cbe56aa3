#include "ddprun/agent/signal_listener.hpp"

namespace ddprun::agent {

SignalListener::SignalListener(boost::asio::io_context& io, const std::vector<int>& signals,
                               std::function<void(int)> handler)
    : set_(io), handler_(std::move(handler)) {
  for (int s : signals) set_.add(s);
  listen();
}

void SignalListener::cancel() { set_.cancel(); }

void SignalListener::listen() {
  set_.async_wait([this](boost::system::error_code ec, int signo) {
    if (ec) return;
    handler_(signo);
    listen();
  });
}

}  // namespace ddprun::agent
