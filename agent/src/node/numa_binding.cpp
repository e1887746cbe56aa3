#include "ddprun/agent/numa_binding.hpp"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}", path.string()));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

int to_int(std::string_view s, std::string_view what) {
  s = trim(s);
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    throw std::invalid_argument(fmt::format("{}: '{}' is not an integer", what, s));
  }
  return v;
}

fs::path sys(const NumaMachine& m) { return m.root / "sys"; }

fs::path cpu_dir(const NumaMachine& m, int cpu) {
  return sys(m) / "devices/system/cpu" / fmt::format("cpu{}", cpu);
}

int numa_node_of_device(const NumaMachine& m, int device) {
  if (device < 0 || device >= static_cast<int>(m.device_pci.size())) {
    throw std::runtime_error(
        fmt::format("no accelerator with index {} ({} visible)", device, m.device_pci.size()));
  }
  const fs::path path = sys(m) / "bus/pci/devices" / m.device_pci[device] / "numa_node";
  // One NUMA node is often written as -1: node 0 then.
  return std::max(to_int(read_file(path), path.string()), 0);
}

CpuSet allowed_cpus_of_node(const NumaMachine& m, int node) {
  const fs::path path = sys(m) / "devices/system/node" / fmt::format("node{}", node) / "cpulist";
  if (!fs::exists(path)) {
    throw std::runtime_error(
        fmt::format("Could not determine CPUs corresponding to numa_node_index={}.", node));
  }
  CpuSet out;
  for (int cpu : parse_cpu_list(read_file(path))) {
    if (m.allowed.contains(cpu)) out.insert(cpu);
  }
  return out;
}

int socket_of_cpu(const NumaMachine& m, int cpu) {
  const fs::path path = cpu_dir(m, cpu) / "topology/physical_package_id";
  if (!fs::exists(path)) {
    throw std::runtime_error(fmt::format("Could not determine socket for cpu_index={}", cpu));
  }
  return to_int(read_file(path), path.string());
}

int socket_of_node(const NumaMachine& m, int node) {
  const CpuSet cpus = allowed_cpus_of_node(m, node);
  if (cpus.empty()) {
    throw std::runtime_error(fmt::format("NUMA node {} has no CPU this process may use", node));
  }
  return socket_of_cpu(m, *cpus.begin());
}

std::vector<int> devices_of_node(const NumaMachine& m, int node) {
  std::vector<int> out;
  for (int d = 0; d < static_cast<int>(m.device_pci.size()); ++d) {
    if (numa_node_of_device(m, d) == node) out.push_back(d);
  }
  return out;
}

// The node of accelerator `device`, and where the device stands among that node's devices.
struct NodeShare {
  int node = 0;
  int position = 0;
  int devices = 0;
};
NodeShare node_share(const NumaMachine& m, int device) {
  NodeShare share;
  share.node = numa_node_of_device(m, device);
  const std::vector<int> devices = devices_of_node(m, share.node);
  share.position =
      static_cast<int>(std::find(devices.begin(), devices.end(), device) - devices.begin());
  share.devices = static_cast<int>(devices.size());
  return share;
}

// The lowest CPU of the group each of `cpus` belongs to -> the group's CPUs among `cpus`.
template <typename GroupOf>
std::map<int, CpuSet> group_by(const CpuSet& cpus, GroupOf group_of) {
  std::map<int, CpuSet> out;
  for (int cpu : cpus) {
    const CpuSet group = group_of(cpu);
    out[group.empty() ? cpu : *group.begin()].insert(cpu);
  }
  return out;
}

CpuSet thread_siblings(const NumaMachine& m, int cpu) {
  return parse_cpu_list(read_file(cpu_dir(m, cpu) / "topology/thread_siblings_list"));
}

// The CPUs sharing the highest-level data or unified cache with `cpu`.
CpuSet last_level_cache_sharers(const NumaMachine& m, int cpu) {
  int max_level = -1;
  CpuSet sharers;
  const fs::path dir = cpu_dir(m, cpu) / "cache";
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  for (const fs::path& index : entries) {
    const std::string name = index.filename().string();
    if (!name.starts_with("index") || name.size() == 5 ||
        !std::all_of(name.begin() + 5, name.end(), ::isdigit)) {
      continue;
    }
    const std::string_view type = trim(read_file(index / "type"));
    if (type != "Unified" && type != "Data") continue;
    const int level = to_int(read_file(index / "level"), (index / "level").string());
    if (level <= max_level) continue;
    max_level = level;
    sharers = parse_cpu_list(read_file(index / "shared_cpu_list"));
  }
  return sharers;
}

CpuSet node_cpus(const NumaMachine& m, int device) {
  return allowed_cpus_of_node(m, numa_node_of_device(m, device));
}

CpuSet socket_cpus(const NumaMachine& m, int device) {
  const int socket = socket_of_node(m, numa_node_of_device(m, device));
  CpuSet out;
  const fs::path possible = sys(m) / "devices/system/node/possible";
  for (int node : parse_cpu_list(read_file(possible))) {
    if (socket_of_node(m, node) == socket) {
      const CpuSet cpus = allowed_cpus_of_node(m, node);
      out.insert(cpus.begin(), cpus.end());
    }
  }
  return out;
}

CpuSet exclusive_cpus(const NumaMachine& m, int device) {
  const auto [node, position, n] = node_share(m, device);
  const auto cores =
      group_by(allowed_cpus_of_node(m, node), [&](int cpu) { return thread_siblings(m, cpu); });
  const int per_device = static_cast<int>(cores.size()) / n;
  const int extra = static_cast<int>(cores.size()) % n;
  if (per_device < 1) {
    throw std::runtime_error(fmt::format(
        "There are only {} physical cores on numa_node_index={}, but there are {} devices "
        "associated with this NUMA node.",
        cores.size(), node, n));
  }
  const int start = position * per_device + std::min(position, extra);
  const int end = start + per_device + (position < extra ? 1 : 0);
  CpuSet out;
  int i = 0;
  for (const auto& [first, cpus] : cores) {
    if (i >= start && i < end) out.insert(cpus.begin(), cpus.end());
    ++i;
  }
  return out;
}

CpuSet core_complex_cpus(const NumaMachine& m, int device) {
  [[maybe_unused]] const auto [node, position, devices] = node_share(m, device);
  const auto caches = group_by(allowed_cpus_of_node(m, node),
                               [&](int cpu) { return last_level_cache_sharers(m, cpu); });
  if (caches.empty()) {
    throw std::runtime_error(fmt::format("NUMA node {} has no CPU this process may use", node));
  }
  // Caches with more usable CPUs first, then by their lowest CPU.
  std::vector<std::pair<int, CpuSet>> ordered(caches.begin(), caches.end());
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  return ordered[position % ordered.size()].second;
}

// Each mode: torch's name for it and how its CPUs are found.
struct ModeEntry {
  NumaMode mode;
  std::string_view name;
  CpuSet (*cpus)(const NumaMachine&, int);
};
constexpr ModeEntry kModes[] = {{NumaMode::kNode, "node", node_cpus},
                                {NumaMode::kSocket, "socket", socket_cpus},
                                {NumaMode::kExclusive, "exclusive", exclusive_cpus},
                                {NumaMode::kCoreComplex, "core-complex", core_complex_cpus}};

const ModeEntry& entry(NumaMode mode) {
  for (const ModeEntry& m : kModes) {
    if (m.mode == mode) return m;
  }
  return kModes[0];
}

}  // namespace

std::optional<NumaMode> parse_numa_mode(std::string_view text) {
  for (const ModeEntry& m : kModes) {
    if (m.name == text) return m.mode;
  }
  return std::nullopt;
}

std::string_view numa_mode_name(NumaMode mode) { return entry(mode).name; }

CpuSet parse_cpu_list(std::string_view text) {
  CpuSet out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      out.insert(to_int(item, "cpu list"));
      continue;
    }
    const int first = to_int(item.substr(0, dash), "cpu list");
    const int last = to_int(item.substr(dash + 1), "cpu list");
    if (first < 0 || last < first) {
      throw std::invalid_argument(fmt::format("cpu list: bad range '{}'", item));
    }
    for (int cpu = first; cpu <= last; ++cpu) out.insert(cpu);
  }
  return out;
}

std::string format_cpu_list(const CpuSet& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int first = *it;
    int last = first;
    for (++it; it != cpus.end() && *it == last + 1; ++it) last = *it;
    if (!out.empty()) out += ',';
    out += first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
  }
  return out;
}

CpuSet numa_cpus(const NumaMachine& machine, NumaMode mode, int device) {
  CpuSet cpus = entry(mode).cpus(machine, device);
  if (cpus.empty()) throw std::runtime_error("Must bind to a non-empty set of CPU indices");
  return cpus;
}

std::vector<std::string> cuda_device_pci_addresses() {
  // The few driver entry points needed, declared here so that ddprun builds without CUDA's
  // headers: CUresult cuInit(unsigned), cuDeviceGetCount(int*), cuDeviceGet(CUdevice*, int),
  // cuDeviceGetAttribute(int*, CUdevice_attribute, CUdevice); CUDA_SUCCESS is 0.
  using Init = int (*)(unsigned);
  using GetCount = int (*)(int*);
  using Get = int (*)(int*, int);
  using GetAttribute = int (*)(int*, int, int);
  constexpr int kPciBusId = 33, kPciDeviceId = 34, kPciDomainId = 50;
  const std::runtime_error none("No accelerator available for NUMA binding");
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) throw none;
  const auto init = reinterpret_cast<Init>(::dlsym(lib, "cuInit"));
  const auto count = reinterpret_cast<GetCount>(::dlsym(lib, "cuDeviceGetCount"));
  const auto get = reinterpret_cast<Get>(::dlsym(lib, "cuDeviceGet"));
  const auto attribute = reinterpret_cast<GetAttribute>(::dlsym(lib, "cuDeviceGetAttribute"));
  int n = 0;
  if (init == nullptr || count == nullptr || get == nullptr || attribute == nullptr ||
      init(0) != 0 || count(&n) != 0 || n == 0) {
    throw none;
  }
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    int dev = 0, domain = 0, bus = 0, slot = 0;
    if (get(&dev, i) != 0 || attribute(&domain, kPciDomainId, dev) != 0 ||
        attribute(&bus, kPciBusId, dev) != 0 || attribute(&slot, kPciDeviceId, dev) != 0) {
      throw std::runtime_error(fmt::format("the CUDA driver has no PCI address of device {}", i));
    }
    out.push_back(fmt::format("{:04x}:{:02x}:{:02x}.0", domain, bus, slot));
  }
  return out;  // the library stays loaded: unloading a driver library is not worth the risk
}

CpuSet current_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CpuSet out;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.insert(cpu);
  }
  return out;
}

}  // namespace ddprun::agent
