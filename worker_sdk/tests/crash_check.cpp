// A worker that fails on rank 1, for the error-file test: `crash_check throw` raises an exception,
// `crash_check segv` dereferences a null pointer. Other ranks wait to be stopped.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "ddp/errors.hpp"
#include "ddp/run_main.hpp"

int main(int argc, char** argv) {
  return ddp::run_main(argc, argv, [](int argc, char** argv) {
    const char* rank = std::getenv("RANK");
    if (rank == nullptr || std::strcmp(rank, "1") != 0) {
      std::this_thread::sleep_for(std::chrono::seconds(60));  // until the agent stops this rank
      return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "segv") == 0) {
      volatile int* p = nullptr;
      return *p;
    }
    throw ddp::CommError("all_reduce of 1024 float32 failed: peer closed the connection");
  });
}
