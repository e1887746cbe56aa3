#include <catch2/catch.hpp>

#include "ddprun/store/local_address.hpp"

using ddprun::store::host_name;
using ddprun::store::names_this_machine;

TEST_CASE("local address: an endpoint names this machine as torchrun decides it",
          "[local_address]") {
  for (const char* here :
       {"localhost", "127.0.0.1", "127.3.4.5", "::1", "0:0::1", "::ffff:127.0.0.1"}) {
    CHECK(names_this_machine(here));
  }
  CHECK(names_this_machine(host_name()));
  // Another machine's address, a name that does not resolve, a name that only looks like one.
  for (const char* there : {"192.0.2.77", "2001:db8::7", "no-such-host.invalid", "127.foo"}) {
    CHECK_FALSE(names_this_machine(there));
  }
}
