#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>

#include "watchers/file_timer.hpp"

using namespace ddprun::agent;
using namespace std::chrono_literals;

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string request(int pid, const std::string& scope, double expiration, int signal) {
  return fmt::format(R"({{"version": 1, "pid": {}, "scope_id": "{}", "expiration_time": {:.6f}, )"
                     R"("signal": {}}})",
                     pid, scope, expiration, signal) +
         "\n";
}

// Writes as torch's FileTimerClient does: open without blocking, write, close.
void send(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
  REQUIRE(fd >= 0);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    REQUIRE(n > 0);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

std::string fifo_path() {
  return (std::filesystem::temp_directory_path() /
          fmt::format("ddprun-timer-test-{}-{}", ::getpid(), std::rand()))
      .string();
}

constexpr int kWorker = 4242;  // the one pid this node runs, as far as the server knows

// A server on a fresh FIFO for which kWorker alone is a worker, recording what expires.
struct Served {
  boost::asio::io_context io;
  std::vector<ExpiredTimer> expired;
  std::string path = fifo_path();
  FileTimerServer server{io, path, [](int pid) { return pid == kWorker; },
                         [this](const ExpiredTimer& t) { expired.push_back(t); }};
};

}  // namespace

TEST_CASE("file timer: torch's request lines parse and anything else is refused", "[timer]") {
  std::string why;
  auto r = parse_timer_request(
      R"({"version": 1, "pid": 12, "scope_id": "step", "expiration_time": 1.5, "signal": 9})",
      &why);
  REQUIRE(r);
  CHECK(r->pid == 12);
  CHECK(r->scope == "step");
  CHECK(r->expiration_time == 1.5);
  CHECK(r->signal == 9);
  r = parse_timer_request(R"({"pid": 12, "scope_id": "s", "expiration_time": -1, "signal": 0})",
                          &why);
  REQUIRE(r);
  CHECK(r->expiration_time < 0);
  for (const char* bad :
       {"garbage", "[]", R"({"pid": "12", "scope_id": "s", "expiration_time": 1})",
        R"({"pid": 0, "scope_id": "s", "expiration_time": 1})",
        R"({"pid": 99999999999, "scope_id": "s", "expiration_time": 1})",
        R"({"pid": 12, "scope_id": 3, "expiration_time": 1})", R"({"pid": 12, "scope_id": "s"})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1, "signal": 999})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1, "signal": 1.5})"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_timer_request(bad, &why));
    CHECK_FALSE(why.empty());
  }
}

TEST_CASE("file timer: an expired timer of a worker is reported once with its overstay",
          "[timer]") {
  Served served;
  auto& [io, expired, path, server] = served;
  send(path, request(kWorker, "step", unix_now() + 0.2, SIGKILL) +
                 request(kWorker, "inner", unix_now() + 0.3, SIGTERM));
  io.run_for(1s);
  REQUIRE(expired.size() == 1);  // the earliest; the worker's other timer goes with it
  CHECK(expired[0].pid == kWorker);
  CHECK(expired[0].scope == "step");
  CHECK(expired[0].signal == SIGKILL);
  CHECK(expired[0].overstay < 300ms);
  CHECK(server.size() == 0);
}

TEST_CASE("file timer: a released timer never expires", "[timer]") {
  Served served;
  auto& [io, expired, path, server] = served;
  send(path, request(kWorker, "step", unix_now() + 0.2, SIGKILL));
  send(path, request(kWorker, "step", -1, 0));
  io.run_for(600ms);
  CHECK(expired.empty());
  CHECK(server.size() == 0);
}

TEST_CASE("file timer: garbage oversized lines and foreign pids change nothing", "[timer]") {
  Served served;
  auto& [io, expired, path, server] = served;
  std::string flood;
  for (int i = 0; i < 2000; ++i) flood += "not json at all\n";
  flood += std::string(3 * FileTimerServer::kMaxLine, 'x') + "\n";  // dropped whole
  flood += request(1, "foreign", unix_now() - 10, SIGKILL);         // init is nobody's worker
  flood += request(::getpid(), "me", unix_now() - 10, SIGKILL);
  flood += request(kWorker, "after-the-garbage", unix_now() - 1, SIGTERM);
  send(path, flood);
  io.run_for(500ms);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == kWorker);
  CHECK(expired[0].scope == "after-the-garbage");
}

TEST_CASE("file timer: a timer that asks for no signal expires without one", "[timer]") {
  Served served;
  auto& [io, expired, path, server] = served;
  send(path, request(kWorker, "quiet", unix_now() - 1, 0));
  io.run_for(400ms);
  CHECK(expired.empty());
  CHECK(server.size() == 0);
}

TEST_CASE("file timer: the FIFO replaces what was at its path and goes with the server",
          "[timer]") {
  boost::asio::io_context io;
  const std::string path = fifo_path();
  { std::ofstream(path) << "stale"; }
  {
    FileTimerServer server(
        io, path, [](int) { return true; }, [](const ExpiredTimer&) {});
    CHECK(std::filesystem::is_fifo(path));
  }
  CHECK_FALSE(std::filesystem::exists(path));
}
