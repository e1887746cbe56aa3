#include "python_number.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "ddprun/agent/split.hpp"

namespace ddprun::launcher {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Reads digits with single underscores between them from text[at], appending the digits to `out`:
// whether there was at least one digit and no misplaced underscore.
bool digit_part(std::string_view text, size_t& at, std::string& out) {
  if (at >= text.size() || !is_digit(text[at])) return false;
  while (at < text.size()) {
    if (is_digit(text[at])) {
      out.push_back(text[at++]);
    } else if (text[at] == '_' && at + 1 < text.size() && is_digit(text[at + 1])) {
      ++at;
    } else {
      break;
    }
  }
  return true;
}

bool lower_equals(std::string_view text, std::string_view lower) {
  if (text.size() != lower.size()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != lower[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<double> python_float(std::string_view text) {
  std::string_view t = agent::trimmed(text);
  bool negative = false;
  if (!t.empty() && (t.front() == '+' || t.front() == '-')) {
    negative = t.front() == '-';
    t.remove_prefix(1);
  }
  const double sign = negative ? -1.0 : 1.0;
  if (lower_equals(t, "inf") || lower_equals(t, "infinity")) {
    return sign * std::numeric_limits<double>::infinity();
  }
  if (lower_equals(t, "nan")) return std::numeric_limits<double>::quiet_NaN();
  std::string clean;
  size_t at = 0;
  const bool whole = digit_part(t, at, clean);
  bool fraction = false;
  if (at < t.size() && t[at] == '.') {
    clean.push_back(t[at++]);
    fraction = digit_part(t, at, clean);
  }
  if (!whole && !fraction) return std::nullopt;
  if (at < t.size() && (t[at] == 'e' || t[at] == 'E')) {
    clean.push_back(t[at++]);
    if (at < t.size() && (t[at] == '+' || t[at] == '-')) clean.push_back(t[at++]);
    if (!digit_part(t, at, clean)) return std::nullopt;
  }
  if (at != t.size()) return std::nullopt;
  double value = 0;
  const auto [end, ec] = std::from_chars(clean.data(), clean.data() + clean.size(), value);
  if (ec == std::errc::result_out_of_range) {
    // Beyond the range Python gives inf, below it 0 (or the nearest subnormal): strtod rounds so
    // too, on a text that is plain decimal by now (no hex, no inf or nan; no locale is set).
    return sign * std::strtod(clean.c_str(), nullptr);
  }
  if (ec != std::errc() || end != clean.data() + clean.size()) return std::nullopt;
  return sign * value;
}

std::optional<long> python_int(std::string_view text) {
  std::string_view t = agent::trimmed(text);
  std::string clean;
  if (!t.empty() && (t.front() == '+' || t.front() == '-')) {
    if (t.front() == '-') clean.push_back('-');
    t.remove_prefix(1);
  }
  size_t at = 0;
  if (!digit_part(t, at, clean) || at != t.size()) return std::nullopt;
  long value = 0;
  const auto [end, ec] = std::from_chars(clean.data(), clean.data() + clean.size(), value);
  if (ec != std::errc() || end != clean.data() + clean.size()) return std::nullopt;
  return value;
}

}  // namespace ddprun::launcher
