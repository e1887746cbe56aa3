#include "hostfile.hpp"

#include <algorithm>
#include <charconv>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace ddprun::launcher {
namespace {

std::vector<std::string_view> split(std::string_view text, std::string_view separators) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = text.find_first_not_of(separators, pos);
    if (start == std::string_view::npos) break;
    const size_t end = std::min(text.find_first_of(separators, start), text.size());
    out.push_back(text.substr(start, end - start));
    pos = end;
  }
  return out;
}

std::optional<int> positive(std::string_view s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 1) return std::nullopt;
  return v;
}

void add_host(std::vector<HostSlots>& hosts, HostSlots h, const std::string& where) {
  // ssh would read a name starting with '-' as an option.
  if (h.host.empty() || h.host.starts_with("-")) {
    throw std::invalid_argument(fmt::format("{}: '{}' is not a host name", where, h.host));
  }
  for (const auto& other : hosts) {
    if (other.host == h.host) {
      throw std::invalid_argument(fmt::format("{}: host '{}' is named twice", where, h.host));
    }
  }
  hosts.push_back(std::move(h));
}

}  // namespace

std::vector<HostSlots> parse_hostfile(std::string_view text, const std::string& source) {
  std::vector<HostSlots> hosts;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    line = line.substr(0, line.find('#'));
    const auto words = split(line, " \t\r");
    if (words.empty()) continue;
    const std::string where = fmt::format("{} line {}", source, line_no);
    HostSlots h{std::string(words[0]), std::nullopt};
    for (size_t i = 1; i < words.size(); ++i) {
      const std::string_view w = words[i];
      const size_t eq = w.find('=');
      const std::string_view key = w.substr(0, eq);
      const auto value = eq == std::string_view::npos ? std::nullopt : positive(w.substr(eq + 1));
      if (key != "slots" && key != "max_slots" && key != "max-slots") {
        throw std::invalid_argument(
            fmt::format("{}: '{}' is not slots=N (lines are: host slots=N)", where, w));
      }
      if (!value) {
        throw std::invalid_argument(fmt::format("{}: '{}' needs a count of at least 1", where, w));
      }
      if (key == "slots") h.slots = value;  // max_slots only bounds oversubscription in mpirun
    }
    add_host(hosts, std::move(h), where);
  }
  if (hosts.empty()) throw std::invalid_argument(fmt::format("{}: names no host", source));
  return hosts;
}

std::vector<HostSlots> parse_host_list(std::string_view text) {
  std::vector<HostSlots> hosts;
  for (std::string_view item : split(text, ",")) {
    const size_t colon = item.rfind(':');
    HostSlots h{std::string(item.substr(0, colon)), std::nullopt};
    if (colon != std::string_view::npos) {
      h.slots = positive(item.substr(colon + 1));
      if (!h.slots || colon == 0) {
        throw std::invalid_argument(
            fmt::format("-H: '{}' is not HOST or HOST:SLOTS with SLOTS at least 1", item));
      }
    }
    add_host(hosts, std::move(h), "-H");
  }
  if (hosts.empty()) throw std::invalid_argument("-H: names no host");
  return hosts;
}

std::vector<HostSlots> select_hosts(const std::vector<HostSlots>& hosts, const std::string& include,
                                    const std::string& exclude) {
  const auto names = [&](const std::string& text, const char* flag) {
    std::set<std::string> out;
    for (std::string_view name : split(text, "@")) {
      if (name.find(':') != std::string_view::npos) {
        throw std::invalid_argument(fmt::format(
            "{} '{}': selecting slots of a host is not supported; give host names", flag, name));
      }
      const bool known = std::any_of(hosts.begin(), hosts.end(),
                                     [&](const HostSlots& h) { return h.host == name; });
      if (!known) {
        throw std::invalid_argument(fmt::format("{}: '{}' is not one of the hosts", flag, name));
      }
      out.emplace(name);
    }
    return out;
  };
  const std::set<std::string> in = names(include, "--include");
  const std::set<std::string> out = names(exclude, "--exclude");
  std::vector<HostSlots> selected;
  for (const auto& h : hosts) {
    if ((in.empty() || in.contains(h.host)) && !out.contains(h.host)) selected.push_back(h);
  }
  if (selected.empty()) throw std::invalid_argument("--include/--exclude leave no host");
  return selected;
}

}  // namespace ddprun::launcher
