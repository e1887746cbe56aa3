// The agent's and the head node's signal listener: signals reach its handler on the loop until
// cancel(), and once it is gone they are ignored rather than ending the process that is cleaning
// up.
#include <csignal>

#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>

#include "ddprun/agent/signal_listener.hpp"

using ddprun::agent::SignalListener;

namespace {

void (*disposition(int signo))(int) {
  struct sigaction now {};
  ::sigaction(signo, nullptr, &now);
  return now.sa_handler;
}

}  // namespace

TEST_CASE("signal listener: a signal reaches the listener's handler on its loop, every time",
          "[signal_listener]") {
  boost::asio::io_context io;
  std::vector<int> got;
  SignalListener listener(io, {SIGUSR2}, [&](int signo) { got.push_back(signo); });
  for (int i = 0; i < 2; ++i) {
    std::raise(SIGUSR2);
    io.run_for(std::chrono::seconds(5));
    io.restart();
    REQUIRE(got.size() == static_cast<size_t>(i + 1));
  }
  CHECK(got == std::vector<int>{SIGUSR2, SIGUSR2});
}

TEST_CASE("signal listener: after cancel a signal is dropped: no handler runs",
          "[signal_listener]") {
  boost::asio::io_context io;
  int calls = 0;
  SignalListener listener(io, {SIGUSR2}, [&](int) { ++calls; });
  listener.cancel();
  std::raise(SIGUSR2);
  io.run_for(std::chrono::milliseconds(200));
  CHECK(calls == 0);
}

TEST_CASE("signal listener: a signal that arrives once the listener is gone is ignored, not fatal",
          "[signal_listener]") {
  std::signal(SIGUSR2, SIG_DFL);  // (as it was before any listener of this program)
  {
    boost::asio::io_context io;
    SignalListener listener(io, {SIGUSR2}, [](int) {});
  }
  CHECK(disposition(SIGUSR2) == SIG_IGN);
  std::raise(SIGUSR2);  // with the default action, this would end the test program
  std::signal(SIGUSR2, SIG_DFL);
}
