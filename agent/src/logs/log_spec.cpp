#include "ddprun/agent/log_spec.hpp"

#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

#include "ddprun/agent/split.hpp"

namespace ddprun::agent {
namespace {

int parse_int(std::string_view s, const std::string& whole) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || v < 0) {
    throw std::invalid_argument(fmt::format("'{}' is not a valid value", whole));
  }
  return v;
}

Std to_std(std::string_view s, const std::string& whole) {
  const int v = parse_int(s, whole);
  if (v > 3) throw std::invalid_argument(fmt::format("'{}': stream values are 0-3", whole));
  return static_cast<Std>(v);
}

}  // namespace

std::vector<Std> parse_std_spec(const std::string& text, int nproc) {
  if (text.find(':') == std::string::npos) {
    return std::vector<Std>(nproc, to_std(trimmed(text), "--redirects/--tee " + text));
  }
  std::vector<Std> out(nproc, Std::kNone);
  std::string_view rest(text);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) {
      throw std::invalid_argument(fmt::format("--redirects/--tee '{}': expected rank:value", text));
    }
    const int rank = parse_int(trimmed(item.substr(0, colon)), text);
    const Std value = to_std(trimmed(item.substr(colon + 1)), text);
    if (rank < nproc) out[rank] = value;  // (a rank this node has not: nothing, as torchrun's)
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) {
      throw std::invalid_argument(fmt::format("--redirects/--tee '{}': trailing comma", text));
    }
  }
  return out;
}

std::optional<std::set<int>> parse_rank_filter(const std::string& text) {
  if (text.empty()) return std::nullopt;
  std::set<int> out;
  std::string_view rest(text);
  while (true) {
    const auto comma = rest.find(',');
    out.insert(parse_int(trimmed(rest.substr(0, comma)), "--local_ranks_filter " + text));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

}  // namespace ddprun::agent
