// A worker that beats through libddp: `heartbeat_probe BEATS INTERVAL_MS [hang]` beats BEATS times,
// INTERVAL_MS apart, printing nothing, then exits 0, or with `hang` sleeps for an hour.
// `heartbeat_probe flood SECONDS` beats as fast as it can for SECONDS, then exits 0.
// `heartbeat_probe cost N` times N beats and prints the nanoseconds one took
// (scripts/bench/hang.sh).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <ddp/heartbeat.hpp>

int main(int argc, char** argv) {
  using namespace std::chrono;
  if (argc >= 3 && std::string(argv[1]) == "flood") {
    const auto end = steady_clock::now() + seconds(std::atoi(argv[2]));
    while (steady_clock::now() < end) {
      for (int i = 0; i < 1000; ++i) ddp::heartbeat();
    }
    return 0;
  }
  if (argc >= 3 && std::string(argv[1]) == "cost") {
    const long n = std::atol(argv[2]);
    ddp::heartbeat();  // the first call maps the file
    const auto start = steady_clock::now();
    for (long i = 0; i < n; ++i) ddp::heartbeat();
    const auto ns = duration_cast<nanoseconds>(steady_clock::now() - start).count();
    std::printf("%.2f\n", static_cast<double>(ns) / static_cast<double>(n));
    return 0;
  }
  if (argc < 3) return 2;
  for (int i = 0; i < std::atoi(argv[1]); ++i) {
    ddp::heartbeat();
    std::this_thread::sleep_for(milliseconds(std::atoi(argv[2])));
  }
  if (argc > 3 && std::string(argv[3]) == "hang") std::this_thread::sleep_for(hours(1));
  return 0;
}
