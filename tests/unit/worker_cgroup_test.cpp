// The cgroup pieces: finding this process's cgroup v2 folder, reading memory.events, what the
// summary says of an OOM kill, and a tree beside one a killed agent left. (Workers in real cgroups
// are exercised by tests/launcher/containment_test.py.)
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "ddprun/agent/failure_summary.hpp"
#include "ddprun/agent/worker_cgroup.hpp"

using namespace ddprun::agent;

namespace {

// A hybrid machine's mountinfo (v1 controllers, cgroup2 at /sys/fs/cgroup/unified) and a pure v2
// one's.
constexpr const char* kHybrid =
    "24 31 0:22 / /sys rw,nosuid - sysfs sysfs rw\n"
    "30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 "
    "cgroup2 rw,nsdelegate\n"
    "35 30 0:31 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n";
constexpr const char* kPureV2 =
    "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n";

}  // namespace

TEST_CASE("cgroup: this process's v2 folder is the cgroup2 mount joined with its 0:: path",
          "[cgroup]") {
  CHECK(own_cgroup_dir(kPureV2, "0::/system.slice/train.service\n") ==
        "/sys/fs/cgroup/system.slice/train.service");
  CHECK(own_cgroup_dir(kHybrid, "4:memory:/job\n0::/\n") == "/sys/fs/cgroup/unified");
  CHECK(own_cgroup_dir(kHybrid, "4:memory:/job\n1:cpu:/\n") == std::nullopt);  // no v2 line
  CHECK(own_cgroup_dir("35 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
                       "0::/\n") == std::nullopt);  // no cgroup2 mount
}

TEST_CASE("cgroup: memory.events counts OOM kills", "[cgroup]") {
  CHECK(oom_kills("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n") == 2);
  CHECK(oom_kills("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n") == 0);
  CHECK(oom_kills("") == 0);
}

TEST_CASE("summary: a worker its cgroup says the OOM killer killed is named as such", "[cgroup]") {
  WorkerFailure f;
  f.pid = 42;
  f.exitcode = -9;
  f.oom_killed = true;
  CHECK_THAT(describe_failure(f), Catch::Contains("the kernel's out-of-memory killer killed it"));
  CHECK_THAT(describe_failure(f), !Catch::Contains("usual sender"));
}

TEST_CASE("cgroup: a tree a killed agent of the same pid left is passed by, not taken over",
          "[cgroup]") {
  auto slurp = [](const char* path) {
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
  };
  const auto own = own_cgroup_dir(slurp("/proc/self/mountinfo"), slurp("/proc/self/cgroup"));
  REQUIRE(own);
  // What an agent with this pid left when it and its guardian were killed: its tree and a worker
  // folder in it.
  const std::string left = *own + "/ddprun." + std::to_string(::getpid());
  REQUIRE(::mkdir(left.c_str(), 0755) == 0);
  REQUIRE(::mkdir((left + "/w0").c_str(), 0755) == 0);
  {
    std::string why;
    const auto tree = CgroupTree::open(why);
    REQUIRE(tree);
    CHECK(tree->path() == left + ".1");
    const auto worker = tree->make_worker();
    REQUIRE(worker);
    CHECK(worker->path() == left + ".1/w0");
  }
  CHECK_FALSE(std::filesystem::exists(left + ".1"));  // this tree goes with its owner
  CHECK(std::filesystem::exists(left + "/w0"));       // the one left is not its to remove
  ::rmdir((left + "/w0").c_str());
  ::rmdir(left.c_str());
}
