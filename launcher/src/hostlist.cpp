#include "hostlist.hpp"

#include <cctype>
#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

#include "ddprun/agent/split.hpp"
#include "option_values.hpp"

namespace ddprun::launcher {
namespace {

[[noreturn]] void malformed(std::string_view list, std::string_view why) {
  throw std::invalid_argument(fmt::format("malformed host list '{}': {}", list, why));
}

unsigned long parse_number(std::string_view list, std::string_view s) {
  unsigned long v = 0;
  if (!all_digits(s) || s.size() > 18 ||
      std::from_chars(s.data(), s.data() + s.size(), v).ec != std::errc()) {
    malformed(list, fmt::format("'{}' is not a number", s));
  }
  return v;
}

// The strings one bracket group's contents stand for: "01-03,7" -> 01 02 03 7.
std::vector<std::string> expand_group(std::string_view list, std::string_view group) {
  std::vector<std::string> out;
  if (group.empty()) malformed(list, "an empty [] group");
  for (const std::string_view item : agent::split(group)) {
    const size_t dash = item.find('-');
    const std::string_view lo_text = item.substr(0, dash);
    const std::string_view hi_text =
        dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    const unsigned long lo = parse_number(list, lo_text), hi = parse_number(list, hi_text);
    if (hi < lo) malformed(list, fmt::format("the range '{}' runs backwards", item));
    if (hi - lo >= kMaxHosts || out.size() + (hi - lo) >= kMaxHosts) {
      malformed(list, fmt::format("more than {} hosts", kMaxHosts));
    }
    for (unsigned long v = lo; v <= hi; ++v) {
      out.push_back(fmt::format("{:0{}}", v, lo_text.size()));
    }
  }
  return out;
}

// One name with any number of bracket groups, appended to `out`.
void expand_name(std::string_view list, std::string_view name, std::vector<std::string>& out) {
  std::vector<std::string> partial = {""};
  size_t pos = 0;
  while (pos < name.size()) {
    const size_t open = name.find('[', pos);
    const size_t close_before = name.find(']', pos);
    if (close_before < open) malformed(list, "']' without '['");
    const std::string_view text = name.substr(pos, open - pos);
    for (auto& p : partial) p.append(text);
    if (open == std::string_view::npos) break;
    const size_t close = name.find(']', open);
    if (close == std::string_view::npos) malformed(list, "'[' without ']'");
    const std::string_view group = name.substr(open + 1, close - open - 1);
    if (group.find('[') != std::string_view::npos) malformed(list, "nested brackets");
    const std::vector<std::string> values = expand_group(list, group);
    if (partial.size() * values.size() + out.size() > kMaxHosts) {
      malformed(list, fmt::format("more than {} hosts", kMaxHosts));
    }
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (const auto& p : partial)
      for (const auto& v : values) next.push_back(p + v);
    partial = std::move(next);
    pos = close + 1;
  }
  for (auto& p : partial) out.push_back(std::move(p));
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list) {
  std::vector<std::string> out;
  size_t depth = 0, start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char ch = i < list.size() ? list[i] : ',';
    if (ch == '[') ++depth;
    if (ch == ']') {
      if (depth == 0) malformed(list, "']' without '['");
      --depth;
    }
    const bool separator = ch == ',' || std::isspace(static_cast<unsigned char>(ch));
    if (depth == 0 && separator) {
      if (i > start) expand_name(list, list.substr(start, i - start), out);
      start = i + 1;
    }
  }
  if (depth != 0) malformed(list, "'[' without ']'");
  if (out.empty()) malformed(list, "no host");
  return out;
}

std::vector<int> expand_tasks_per_node(std::string_view text) {
  const auto bad = [&] {
    throw std::invalid_argument(
        fmt::format("malformed task counts '{}': expected e.g. 2(x3),1", text));
  };
  std::vector<int> out;
  for (std::string_view item : agent::split(text)) {
    unsigned long repeat = 1;
    if (const size_t paren = item.find("(x"); paren != std::string_view::npos) {
      if (!item.ends_with(")")) bad();
      const std::string_view times = item.substr(paren + 2, item.size() - paren - 3);
      if (!all_digits(times) || times.size() > 7) bad();
      repeat = std::stoul(std::string(times));
      item = item.substr(0, paren);
    }
    if (!all_digits(item) || item.size() > 7 || repeat == 0) bad();
    if (out.size() + repeat > kMaxHosts) bad();
    out.insert(out.end(), repeat, std::stoi(std::string(item)));
  }
  return out;
}

}  // namespace ddprun::launcher
