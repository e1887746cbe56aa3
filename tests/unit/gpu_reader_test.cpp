// Reading the GPUs off the agent's event loop (node/gpu_reader.hpp): an answer comes back as it
// was read; a read that hangs (a wedged GPU) is given up at the limit, without a second thread
// waiting on the same device, and once it ends the next read answers again. No GPU needed: the
// reads here stand for NVML's.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "node/gpu_reader.hpp"

using ddprun::agent::GpuReader;
using ddprun::agent::GpuState;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// One read() run to its end on a fresh io_context, and how long it took.
std::optional<std::vector<GpuState>> read_once(GpuReader& reader, boost::asio::io_context& io,
                                               steady_clock::duration* took = nullptr) {
  std::optional<std::vector<GpuState>> out;
  bool done = false;
  const auto began = steady_clock::now();
  boost::asio::co_spawn(io, reader.read(),
                        [&](std::exception_ptr e, std::optional<std::vector<GpuState>> r) {
                          REQUIRE_FALSE(e);
                          out = std::move(r);
                          done = true;
                        });
  io.restart();
  io.run();
  REQUIRE(done);
  if (took != nullptr) *took = steady_clock::now() - began;
  return out;
}

std::vector<GpuState> two_gpus() {
  std::vector<GpuState> gpus(2);
  gpus[0].uuid = "GPU-a";
  gpus[1].index = 1;
  gpus[1].uuid = "GPU-b";
  gpus[1].compute_pids = {42};
  return gpus;
}

}  // namespace

TEST_CASE("gpu reader: a read that answers gives the GPUs as read", "[gpu]") {
  boost::asio::io_context io;
  GpuReader reader(io, two_gpus, milliseconds(5000));
  const std::optional<std::vector<GpuState>> got = read_once(reader, io);
  REQUIRE(got.has_value());
  REQUIRE(got->size() == 2);
  CHECK((*got)[1].uuid == "GPU-b");
  CHECK((*got)[1].compute_pids == std::vector<int>{42});
}

TEST_CASE(
    "gpu reader: a read that hangs is given up at the limit, no second thread waits on the same "
    "device, and once it ends the next read answers",
    "[gpu]") {
  boost::asio::io_context io;
  std::promise<void> wedge;
  std::shared_future<void> released = wedge.get_future().share();
  // (Shared: were the test to end early, the hung thread would outlive its stack.)
  auto reads = std::make_shared<std::atomic<int>>(0);
  GpuReader reader(
      io,
      [released, reads] {
        if (++*reads == 1) released.wait();  // the first read hangs until the test releases it
        return two_gpus();
      },
      milliseconds(200));
  steady_clock::duration took{};
  CHECK_FALSE(read_once(reader, io, &took).has_value());
  CHECK(took >= milliseconds(200));
  CHECK(took < milliseconds(3000));
  // Still hung: given up at once, and no second read of the device began.
  CHECK_FALSE(read_once(reader, io, &took).has_value());
  CHECK(took < milliseconds(100));
  CHECK(*reads == 1);
  wedge.set_value();
  std::optional<std::vector<GpuState>> again;
  for (int i = 0; i < 500 && !again; ++i) {  // (the hung thread ends a moment after its release)
    again = read_once(reader, io);
    if (!again) std::this_thread::sleep_for(milliseconds(10));
  }
  REQUIRE(again.has_value());
  CHECK(again->size() == 2);
  CHECK(*reads >= 2);
}

TEST_CASE("gpu reader: a read given a sooner deadline than the limit is given up at it", "[gpu]") {
  boost::asio::io_context io;
  std::promise<void> wedge;
  std::shared_future<void> released = wedge.get_future().share();
  GpuReader reader(
      io,
      [released] {
        released.wait();
        return two_gpus();
      },
      milliseconds(30000));
  steady_clock::duration took{};
  std::optional<std::vector<GpuState>> got;
  bool done = false;
  const auto began = steady_clock::now();
  boost::asio::co_spawn(io, reader.read(milliseconds(100)),
                        [&](std::exception_ptr, std::optional<std::vector<GpuState>> r) {
                          got = std::move(r);
                          done = true;
                        });
  io.run();
  took = steady_clock::now() - began;
  wedge.set_value();
  REQUIRE(done);
  CHECK_FALSE(got.has_value());
  CHECK(took < milliseconds(3000));
}

TEST_CASE("gpu reader: a read that throws is no answer, and the next one is made", "[gpu]") {
  boost::asio::io_context io;
  int reads = 0;
  GpuReader reader(
      io,
      [&reads]() -> std::vector<GpuState> {
        if (++reads == 1) throw std::runtime_error("the driver went away");
        return two_gpus();
      },
      milliseconds(5000));
  CHECK_FALSE(read_once(reader, io).has_value());
  const std::optional<std::vector<GpuState>> next = read_once(reader, io);
  REQUIRE(next.has_value());
  CHECK(next->size() == 2);
}
