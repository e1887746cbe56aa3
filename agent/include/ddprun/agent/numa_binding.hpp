#pragma once
// --numa-binding: the CPUs each worker is bound to, computed as torch 2.14's torch.numa.binding
// computes them from sysfs and the worker's accelerator (the one whose index is its local rank),
// applied with sched_setaffinity in the worker before exec (torchrun wraps the command in
// `numactl --physcpubind`; the resulting affinity is the same).
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::agent {

enum class NumaMode {
  kNode,        // every allowed CPU of the device's NUMA node
  kSocket,      // every allowed CPU of every NUMA node of the device's socket
  kExclusive,   // the device's share of its node's physical cores, none shared with another device
  kCoreComplex  // one group of cores sharing the last-level cache on the device's node
};

// "node", "socket", "exclusive", "core-complex"; nullopt for anything else.
std::optional<NumaMode> parse_numa_mode(std::string_view text);
std::string_view numa_mode_name(NumaMode mode);

using CpuSet = std::set<int>;
// sysfs's list format, "0-3,8,10-11" (whitespace around items ignored). Throws
// std::invalid_argument.
CpuSet parse_cpu_list(std::string_view text);
// The same format, ranges compacted: {0,1,2,4} -> "0-2,4".
std::string format_cpu_list(const CpuSet& cpus);

// What the binding is computed from.
struct NumaMachine {
  std::filesystem::path root = "/";     // sysfs is read under root/sys
  std::vector<std::string> device_pci;  // accelerator index -> PCI address, "0000:dc:00.0"
  CpuSet allowed;                       // the CPUs this process may run on
};

// The CPUs of the worker using accelerator `device`. Throws std::runtime_error with torch's
// reasons (an unknown device, a NUMA node without CPUs, fewer physical cores than devices).
CpuSet numa_cpus(const NumaMachine& machine, NumaMode mode, int device);

// The accelerators this process sees, in CUDA's order (CUDA_VISIBLE_DEVICES applied), through the
// CUDA driver loaded at run time. Throws std::runtime_error("No accelerator available for NUMA
// binding") when the driver is missing or reports no device.
std::vector<std::string> cuda_device_pci_addresses();

// sched_getaffinity of this process.
CpuSet current_affinity();

}  // namespace ddprun::agent
