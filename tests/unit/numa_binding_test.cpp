#include <catch2/catch.hpp>

#include "ddprun/agent/numa_binding.hpp"
#include "sysfs_fixture.hpp"

using namespace ddprun::agent;

namespace {

const std::string kSysfs = DDPRUN_TEST_SYSFS_DIR;
const std::vector<std::string> kTwoSocketGpus = {"0000:01:00.0", "0000:02:00.0", "0000:41:00.0",
                                                 "0000:42:00.0", "0000:81:00.0", "0000:82:00.0",
                                                 "0000:c1:00.0", "0000:c2:00.0"};

std::string bind(const NumaMachine& m, NumaMode mode, int device) {
  return format_cpu_list(numa_cpus(m, mode, device));
}

}  // namespace

TEST_CASE("numa: cpu lists parse and print as sysfs writes them", "[numa]") {
  CHECK(parse_cpu_list("0-3,8, 10-11\n") == CpuSet{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("") == CpuSet{});
  CHECK(format_cpu_list({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7");
  CHECK(format_cpu_list({5}) == "5");
  CHECK_THROWS_AS(parse_cpu_list("3-1"), std::invalid_argument);
  CHECK_THROWS_AS(parse_cpu_list("a"), std::invalid_argument);
}

TEST_CASE("numa: the four modes are torch's names and nothing else", "[numa]") {
  for (const char* name : {"node", "socket", "exclusive", "core-complex"}) {
    const auto mode = parse_numa_mode(name);
    REQUIRE(mode);
    CHECK(numa_mode_name(*mode) == name);
  }
  CHECK_FALSE(parse_numa_mode("core_complex"));
  CHECK_FALSE(parse_numa_mode(""));
}

TEST_CASE("numa: one NUMA node written as -1 binds every device to node 0's CPUs", "[numa]") {
  const ddprun::test::SysfsFixture fx(kSysfs + "/one_node_vm.sysfs");
  NumaMachine m{fx.root(), {"0000:00:04.0", "0000:00:05.0"}, {0, 1}};
  CHECK(bind(m, NumaMode::kNode, 0) == "0-1");
  CHECK(bind(m, NumaMode::kSocket, 1) == "0-1");
  CHECK(bind(m, NumaMode::kExclusive, 0) == "0");  // two single-thread cores, two devices
  CHECK(bind(m, NumaMode::kExclusive, 1) == "1");
  CHECK(bind(m, NumaMode::kCoreComplex, 1) == "0-1");  // one L3 for both
}

TEST_CASE("numa: two sockets of two nodes bind each device near itself", "[numa]") {
  const ddprun::test::SysfsFixture fx(kSysfs + "/two_socket_four_node.sysfs");
  CpuSet all;
  for (int c = 0; c < 32; ++c) all.insert(c);
  NumaMachine m{fx.root(), kTwoSocketGpus, all};
  CHECK(bind(m, NumaMode::kNode, 0) == "0-3,16-19");
  CHECK(bind(m, NumaMode::kNode, 5) == "8-11,24-27");
  CHECK(bind(m, NumaMode::kSocket, 0) == "0-7,16-23");
  CHECK(bind(m, NumaMode::kSocket, 7) == "8-15,24-31");
  // Two devices share node 0's four cores: two whole cores (both threads) each.
  CHECK(bind(m, NumaMode::kExclusive, 0) == "0-1,16-17");
  CHECK(bind(m, NumaMode::kExclusive, 1) == "2-3,18-19");
  CHECK(bind(m, NumaMode::kExclusive, 5) == "10-11,26-27");
  CHECK(bind(m, NumaMode::kCoreComplex, 0) == "0-1,16-17");
  CHECK(bind(m, NumaMode::kCoreComplex, 3) == "6-7,22-23");
}

TEST_CASE("numa: only CPUs the process may use are given out", "[numa]") {
  const ddprun::test::SysfsFixture fx(kSysfs + "/two_socket_four_node.sysfs");
  // Without CPU 0's core, node 0 has three cores for its two devices: the first gets the extra.
  NumaMachine m{fx.root(), kTwoSocketGpus, {1, 2, 3, 17, 18, 19, 4, 5}};
  CHECK(bind(m, NumaMode::kNode, 0) == "1-3,17-19");
  CHECK(bind(m, NumaMode::kExclusive, 0) == "1-2,17-18");
  CHECK(bind(m, NumaMode::kExclusive, 1) == "3,19");
  // The complex with more usable CPUs comes first.
  CHECK(bind(m, NumaMode::kCoreComplex, 0) == "2-3,18-19");
  CHECK(bind(m, NumaMode::kCoreComplex, 1) == "1,17");
  // Node 2 has none of them.
  CHECK_THROWS_WITH(bind(m, NumaMode::kNode, 4), "Must bind to a non-empty set of CPU indices");
}

TEST_CASE("numa: impossible bindings fail with torch's reasons", "[numa]") {
  const ddprun::test::SysfsFixture fx(kSysfs + "/one_node_vm.sysfs");
  NumaMachine m{fx.root(), {"0000:00:04.0", "0000:00:05.0", "0000:00:04.0"}, {0, 1}};
  CHECK_THROWS_WITH(bind(m, NumaMode::kExclusive, 0),
                    Catch::Contains("only 2 physical cores") && Catch::Contains("3 devices"));
  CHECK_THROWS_WITH(bind(m, NumaMode::kNode, 3), Catch::Contains("no accelerator with index 3"));
}
