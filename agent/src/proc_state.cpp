#include "proc_state.hpp"

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

}  // namespace ddprun::agent
