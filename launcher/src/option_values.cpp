#include "option_values.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ddprun/agent/split.hpp"
#include "launch_config.hpp"
#include "python_number.hpp"

namespace ddprun::launcher {
namespace {

[[noreturn]] void invalid(std::string_view what, std::string_view kind, std::string_view text) {
  throw UsageError(fmt::format("argument {}: invalid {} value '{}'", what, kind, text));
}

}  // namespace

bool all_digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

long parse_integer(std::string_view text, std::string_view what) {
  const std::optional<long> value = python_int(text);
  if (!value) invalid(what, "int", text);
  return *value;
}

double parse_double(std::string_view text, std::string_view what) {
  const std::optional<double> value = python_float(text);
  if (!value || !std::isfinite(*value)) invalid(what, "float", text);
  return *value;
}

std::string lowered(std::string_view text) {
  std::string v(text);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return v;
}

bool parse_bool(std::string_view text, std::string_view what) {
  const std::string v = lowered(text);
  if (v == "true" || v == "t" || v == "yes" || v == "y") return true;
  if (v == "false" || v == "f" || v == "no" || v == "n") return false;
  const std::optional<long> n = python_int(v);
  if (!n) invalid(what, "boolean", text);
  return *n != 0;
}

std::chrono::milliseconds parse_seconds(std::string_view text, std::string_view what) {
  const double s = parse_double(text, what);
  if (s < 0 || s > 1e9) invalid(what, "seconds", text);
  return std::chrono::milliseconds(std::llround(s * 1000));
}

agent::PreloadSpec parse_preload(std::string_view text) {
  agent::PreloadSpec spec;
  if (text.empty()) return spec;
  if (text == "auto") {
    spec.modules = {"auto"};
    return spec;
  }
  auto is_identifier = [](std::string_view part) {
    if (part.empty() || std::isdigit(static_cast<unsigned char>(part.front()))) return false;
    return std::all_of(part.begin(), part.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
    });
  };
  for (const std::string_view name : agent::split(text)) {
    const std::vector<std::string_view> parts = agent::split(name, '.');
    const bool valid = !name.empty() && std::all_of(parts.begin(), parts.end(), is_identifier);
    if (!valid || name == "auto") {
      throw UsageError(fmt::format(
          "argument --preload: '{}' is not a Python module name (MODULE,... or auto alone)", name));
    }
    spec.modules.emplace_back(name);
  }
  return spec;
}

}  // namespace ddprun::launcher
