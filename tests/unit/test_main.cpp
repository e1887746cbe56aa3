#define CATCH_CONFIG_RUNNER
#include <sys/resource.h>

#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>

int main(int argc, char** argv) {
  // Scale tests hold thousands of sockets (both ends live in this process).
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  spdlog::set_level(spdlog::level::warn);
  return Catch::Session().run(argc, argv);
}
