#include "watchers/proc_state.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>

namespace ddprun::agent {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

std::optional<char> proc_state_of(std::string_view stat_line) {
  const size_t open = stat_line.find('(');
  const size_t close = stat_line.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  const size_t state = stat_line.find_first_not_of(' ', close + 1);
  if (state == std::string_view::npos || close + 1 == state) return std::nullopt;
  return stat_line[state];
}

std::optional<char> read_proc_state(pid_t pid) {
  return proc_state_of(slurp("/proc/" + std::to_string(pid) + "/stat"));
}

std::string read_wchan(pid_t pid) {
  const std::string w = slurp("/proc/" + std::to_string(pid) + "/wchan");
  return w.empty() || w == "0" ? "?" : w;
}

std::optional<std::chrono::nanoseconds> cpu_wait_of(std::string_view schedstat_line) {
  unsigned long long on_cpu = 0, waiting = 0, slices = 0;
  const std::string line(schedstat_line);
  int used = 0;
  if (std::sscanf(line.c_str(), "%llu %llu %llu%n", &on_cpu, &waiting, &slices, &used) != 3) {
    return std::nullopt;
  }
  if (line.find_first_not_of(" \n", static_cast<size_t>(used)) != std::string::npos) {
    return std::nullopt;
  }
  return std::chrono::nanoseconds(waiting);
}

std::optional<std::chrono::nanoseconds> read_cpu_wait(pid_t pid) {
  return cpu_wait_of(slurp("/proc/" + std::to_string(pid) + "/schedstat"));
}

}  // namespace ddprun::agent
