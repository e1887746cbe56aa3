// Prints the CPUs --numa-binding gives each accelerator of a recorded machine, for the comparison
// with torch 2.14's torch.numa.binding (tests/launcher/numa_binding_test.py):
//   numa_binding_probe RECORDING MODE ALLOWED PCI...
// One line per accelerator: "<index> <cpu list>" or "<index> error: <reason>".
#include <iostream>
#include <string>
#include <vector>

#include "ddprun/agent/numa_binding.hpp"
#include "sysfs_fixture.hpp"

int main(int argc, char** argv) {
  using namespace ddprun::agent;
  if (argc < 5) {
    std::cerr << "usage: numa_binding_probe RECORDING MODE ALLOWED PCI...\n";
    return 2;
  }
  const ddprun::test::SysfsFixture fixture(argv[1]);
  const auto mode = parse_numa_mode(argv[2]);
  if (!mode) return 2;
  NumaMachine machine{fixture.root(), std::vector<std::string>(argv + 4, argv + argc),
                      parse_cpu_list(argv[3])};
  for (int d = 0; d < static_cast<int>(machine.device_pci.size()); ++d) {
    try {
      std::cout << d << " " << format_cpu_list(numa_cpus(machine, *mode, d)) << "\n";
    } catch (const std::exception& e) {
      std::cout << d << " error: " << e.what() << "\n";
    }
  }
  return 0;
}
